// The version of the drover library and binary, and the commit they were
// built from. Both are fixed when the build runs (cmake/write_version.cmake):
// the version is the project's (CMakeLists.txt), the commit is
// `git rev-parse --short=12 HEAD` of the source tree, with "-dirty" when
// tracked files had changes, or the DROVER_GIT_COMMIT cache variable, or
// "unknown" when the source is not a git checkout.
//
// Plain functions returning static strings; thread-safe.

#ifndef DROVER_VERSION_H_
#define DROVER_VERSION_H_

namespace drover {

// "0.1.0"
const char* Version();
// "2c9a4230e1f3", "2c9a4230e1f3-dirty" or "unknown"
const char* GitCommit();

}  // namespace drover

#endif  // DROVER_VERSION_H_
