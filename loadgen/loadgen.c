/* placeholder */
#include "gp_common.h"
