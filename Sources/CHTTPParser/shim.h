#ifndef CHTTPPARSER_SHIM_H
#define CHTTPPARSER_SHIM_H
// Debian builds libhttp-parser with HTTP_PARSER_STRICT=0; the header must agree with the library's layout.
#define HTTP_PARSER_STRICT 0
#include <http_parser.h>

// Bitfields and macros of struct http_parser, read through functions.
static inline unsigned int chp_errno(const http_parser *p) { return p->http_errno; }
static inline unsigned int chp_method(const http_parser *p) { return p->method; }
static inline int chp_is_chunked(const http_parser *p) { return (p->flags & F_CHUNKED) != 0; }
#endif
