/* The project's version, fixed when the build is configured (unlike the
 * commit, which cmake/GpBuildInfo.cmake reads at every build). */
#include "gp_build_info.h"

#ifndef GP_VERSION
#error "GP_VERSION is defined by common/CMakeLists.txt from project(... VERSION)"
#endif

const char *gp_build_version(void)
{
    return GP_VERSION;
}
