/* loadgen's private HTTP helpers: URL joining and the Bearer header, shared
 * by the probe and the streaming clients. */
#ifndef GP_LG_HTTP_IMPL_H
#define GP_LG_HTTP_IMPL_H

#include <curl/curl.h>

#include "gp_loadgen.h"

/* base_url (a trailing '/' dropped) + path; malloc'd, NULL when out of memory. */
char *gp_lg_url(const char *base_url, const char *path);
/* headers plus "Authorization: Bearer KEY" when api_key is set; NULL when out of memory. */
struct curl_slist *gp_lg_auth_header(struct curl_slist *headers, const char *api_key);

#endif
