#ifndef CLIBUV_SHIM_H
#define CLIBUV_SHIM_H
#include <uv.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <malloc.h>

// uv_*_t are C structs whose first member is uv_handle_t: Swift cannot cast between them, so these do.
static inline uv_handle_t *cuv_handle(void *any) { return (uv_handle_t *)any; }
static inline uv_stream_t *cuv_stream(void *any) { return (uv_stream_t *)any; }
#endif
