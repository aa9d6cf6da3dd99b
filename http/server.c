/* placeholder */
#include "gp_http.h"
