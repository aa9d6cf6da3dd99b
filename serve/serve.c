/* placeholder */
#include "gp_serve.h"
