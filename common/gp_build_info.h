/* What the build was made from, for reports of any program (case study,
 * benchmarks, tools): generated at build time by cmake/GpBuildInfo.cmake. */
#ifndef GP_BUILD_INFO_H
#define GP_BUILD_INFO_H

#ifdef __cplusplus
extern "C" {
#endif

/* The project's commit (12 hex digits, or .gp-commit's text), or "unknown"
 * when the sources are not a git checkout of their own and carry no
 * .gp-commit. */
const char *gp_build_commit(void);
/* The project's version (project(... VERSION) in CMakeLists.txt), e.g.
 * "0.1.0". */
const char *gp_build_version(void);

#ifdef __cplusplus
}
#endif
#endif
