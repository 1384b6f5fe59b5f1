// The `meshpool` binary's Env: the real clock, and log lines on stderr as
// "meshpool <source>: <message>" (the libraries themselves never print;
// common/env.h).
#ifndef MESHPOOL_TOOLS_STDERR_ENV_H_
#define MESHPOOL_TOOLS_STDERR_ENV_H_

#include "common/env.h"

namespace meshpool::tools {

// Lives for the whole process. Thread-safe: each line is one write.
Env* StderrEnv();

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_STDERR_ENV_H_
