#ifndef CNGHTTP2_SHIM_H
#define CNGHTTP2_SHIM_H
// libnghttp2 (Debian libnghttp2-dev) for HTTP/2 on the listener; only Sources/HTTPServer/HTTP2Session.swift imports it.
#include <nghttp2/nghttp2.h>
#endif
