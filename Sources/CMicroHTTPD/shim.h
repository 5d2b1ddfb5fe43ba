#ifndef CMICROHTTPD_SHIM_H
#define CMICROHTTPD_SHIM_H
#include <stdint.h>
#include <stdarg.h>
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <microhttpd.h>

// MHD_start_daemon is variadic: the gateway's option set is fixed, so one shim takes them as plain arguments.
typedef enum MHD_Result (*cmhd_access_handler)(void *cls, struct MHD_Connection *connection, const char *url,
                                               const char *method, const char *version, const char *upload_data,
                                               size_t *upload_data_size, void **con_cls);
typedef void (*cmhd_completed_handler)(void *cls, struct MHD_Connection *connection, void **con_cls,
                                       enum MHD_RequestTerminationCode toe);
// Sees the raw, still percent-encoded request target; its result becomes the request's *con_cls.
typedef void *(*cmhd_uri_log_handler)(void *cls, const char *uri, struct MHD_Connection *connection);

// One callback context `cls` serves all three callbacks.
static inline struct MHD_Daemon *cmhd_start_daemon(unsigned int flags, const struct sockaddr *bind_addr,
                                                   cmhd_access_handler handler, cmhd_uri_log_handler uri_log,
                                                   cmhd_completed_handler completed, void *cls,
                                                   unsigned int connection_limit, unsigned int per_ip_limit,
                                                   unsigned int connection_timeout_s, size_t connection_memory_limit,
                                                   size_t thread_stack_size) {
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, cls,
                            MHD_OPTION_SOCK_ADDR, bind_addr,
                            MHD_OPTION_URI_LOG_CALLBACK, uri_log, cls,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, cls,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_s,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
                            MHD_OPTION_THREAD_STACK_SIZE, thread_stack_size,
                            // Strict: HTTP/1.1 without Host and spaces in the target are refused.
                            MHD_OPTION_STRICT_FOR_CLIENT, (int)1,
                            MHD_OPTION_END);
}

// Thread per connection (handlers may block), poll() so descriptors above FD_SETSIZE work, and an
// inter-thread channel so MHD_quiesce_daemon can stop the listener. No MHD_USE_ERROR_LOG: MHD's free-text
// stderr lines would corrupt the gateway's structured log.
static inline unsigned int cmhd_flags(int ipv6) {
    return MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC
           | (ipv6 ? MHD_USE_IPv6 : 0);
}
static inline uint64_t cmhd_size_unknown(void) { return MHD_SIZE_UNKNOWN; }
static inline ssize_t cmhd_content_reader_end_of_stream(void) { return MHD_CONTENT_READER_END_OF_STREAM; }
static inline ssize_t cmhd_content_reader_end_with_error(void) { return MHD_CONTENT_READER_END_WITH_ERROR; }

// The client's socket address (for X-Forwarded-For); NULL when unknown.
static inline const struct sockaddr *cmhd_client_addr(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info ? info->client_addr : NULL;
}

// MHD_get_daemon_info is variadic.
static inline int cmhd_bind_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? (int)info->port : 0;
}
static inline unsigned int cmhd_current_connections(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return info ? info->num_connections : 0;
}
#endif
