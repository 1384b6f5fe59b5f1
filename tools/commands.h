// The `meshpool` subcommands. Each takes the arguments after its name and
// returns the process exit status (0 ok, 1 failure, 2 usage error).
#ifndef MESHPOOL_TOOLS_COMMANDS_H_
#define MESHPOOL_TOOLS_COMMANDS_H_

#include "absl/status/status.h"

namespace meshpool::tools {

int RunCoordinator(int argc, char** argv);
int RunNode(int argc, char** argv);
int RunUp(int argc, char** argv);
int RunDemo(int argc, char** argv);
int RunPut(int argc, char** argv);
int RunGet(int argc, char** argv);
int RunDel(int argc, char** argv);
int RunStat(int argc, char** argv);
int RunBench(int argc, char** argv);
int RunDoctor(int argc, char** argv);

class Flags;

// Parses a subcommand's flags. Returns -1 to go on; otherwise the exit status
// to return at once (after printing --help, or the usage error).
int ParseFlags(Flags& flags, int argc, char** argv, const char* command);

// Prints "meshpool <command>: <status>" to stderr; returns 2 for
// InvalidArgument (usage), 1 otherwise.
int Fail(const char* command, const absl::Status& status);

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_COMMANDS_H_
