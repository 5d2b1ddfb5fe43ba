// The commit a release build was made from, baked in by the compiler's command line:
//   swift build ... -Xcc -DGATEWAY_COMMIT='"<git commit>"'   (scripts/release-build.sh does this)
// Swift imports this header with the -Xcc flags, so the string ends up in the binary. Builds without the
// flag (tests, `swift build` by hand) report "unknown" rather than a guess.
#ifndef GATEWAY_COMMIT
#define GATEWAY_COMMIT "unknown"
#endif
static inline const char *gateway_build_commit(void) { return GATEWAY_COMMIT; }
