#ifndef CCURL_SHIM_H
#define CCURL_SHIM_H
#include <curl/curl.h>

// curl_easy_setopt / curl_easy_getinfo / curl_multi_setopt are variadic: one typed shim per argument kind.
static inline CURLcode ccurl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode ccurl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode ccurl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode ccurl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode ccurl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}
typedef size_t (*ccurl_data_callback)(char *buffer, size_t size, size_t nitems, void *userdata);
static inline CURLcode ccurl_easy_setopt_data_callback(CURL *handle, CURLoption option, ccurl_data_callback cb) {
    return curl_easy_setopt(handle, option, cb);
}
typedef size_t (*ccurl_read_callback)(char *buffer, size_t size, size_t nitems, void *userdata);
static inline CURLcode ccurl_easy_setopt_read_callback(CURL *handle, ccurl_read_callback cb) {
    return curl_easy_setopt(handle, CURLOPT_READFUNCTION, cb);
}
static inline CURLcode ccurl_easy_setopt_closesocket(CURL *handle, curl_closesocket_callback cb, void *data) {
    CURLcode rc = curl_easy_setopt(handle, CURLOPT_CLOSESOCKETFUNCTION, cb);
    if (rc != CURLE_OK) return rc;
    return curl_easy_setopt(handle, CURLOPT_CLOSESOCKETDATA, data);
}
static inline CURLcode ccurl_easy_setopt_prereq(CURL *handle, curl_prereq_callback cb, void *data) {
    CURLcode rc = curl_easy_setopt(handle, CURLOPT_PREREQFUNCTION, cb);
    if (rc != CURLE_OK) return rc;
    return curl_easy_setopt(handle, CURLOPT_PREREQDATA, data);
}
static inline CURLcode ccurl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode ccurl_easy_getinfo_double(CURL *handle, CURLINFO info, double *value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode ccurl_easy_getinfo_string(CURL *handle, CURLINFO info, const char **value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode ccurl_easy_getinfo_off_t(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}
// Sets a request body of exactly `length` bytes (curl copies them). An empty body still needs a valid
// pointer, or curl would read the fields as a C string.
static inline CURLcode ccurl_easy_set_request_body(CURL *handle, const void *bytes, curl_off_t length) {
    CURLcode rc = curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE, length);
    if (rc != CURLE_OK) return rc;
    return curl_easy_setopt(handle, CURLOPT_COPYPOSTFIELDS, length > 0 && bytes ? bytes : "");
}
// CURLMsg.data is a union; this reads the result of a finished transfer.
static inline CURLcode ccurl_msg_result(const CURLMsg *message) {
    return message->data.result;
}
static inline CURLMcode ccurl_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl_multi_setopt(handle, option, value);
}
static inline CURLMcode ccurl_multi_setopt_pointer(CURLM *handle, CURLMoption option, void *value) {
    return curl_multi_setopt(handle, option, value);
}
static inline CURLMcode ccurl_multi_setopt_socket_callback(CURLM *handle, curl_socket_callback cb) {
    return curl_multi_setopt(handle, CURLMOPT_SOCKETFUNCTION, cb);
}
static inline CURLMcode ccurl_multi_setopt_timer_callback(CURLM *handle, curl_multi_timer_callback cb) {
    return curl_multi_setopt(handle, CURLMOPT_TIMERFUNCTION, cb);
}
static inline CURLcode ccurl_easy_getinfo_pointer(CURL *handle, CURLINFO info, char **value) {
    return curl_easy_getinfo(handle, info, value);
}
// Macros Swift cannot import.
static inline size_t ccurl_writefunc_pause(void) { return CURL_WRITEFUNC_PAUSE; }
static inline size_t ccurl_readfunc_pause(void) { return CURL_READFUNC_PAUSE; }
static inline size_t ccurl_readfunc_abort(void) { return CURL_READFUNC_ABORT; }
static inline int ccurl_pause_cont(void) { return CURLPAUSE_CONT; }
static inline curl_socket_t ccurl_socket_timeout(void) { return CURL_SOCKET_TIMEOUT; }
#endif
