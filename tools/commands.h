// The `meshpool` subcommands. Each takes the arguments after its name and
// returns the process exit status (0 ok, 1 failure, 2 usage error).
#ifndef MESHPOOL_TOOLS_COMMANDS_H_
#define MESHPOOL_TOOLS_COMMANDS_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "meshpool/client.h"

namespace meshpool::tools {

int RunCoordinator(int argc, char** argv);
int RunNode(int argc, char** argv);
int RunUp(int argc, char** argv);
int RunLaunch(int argc, char** argv);
int RunDemo(int argc, char** argv);
int RunPut(int argc, char** argv);
int RunGet(int argc, char** argv);
int RunDel(int argc, char** argv);
int RunStat(int argc, char** argv);
int RunTop(int argc, char** argv);
int RunBench(int argc, char** argv);
int RunDoctor(int argc, char** argv);
int RunWeights(int argc, char** argv);
int RunPin(int argc, char** argv);
int RunPrefix(int argc, char** argv);
int RunCerts(int argc, char** argv);

class Flags;

// Declares the flags every client command takes: --coordinator, the RDMA
// device flags and the TLS flags.
void DefineClientFlags(Flags& flags);

// Parses a client command's flags, checks it got min..max positional
// arguments and connects. On failure returns null with the exit status in
// *rc (help printed, usage error, or no coordinator).
std::unique_ptr<Client> OpenClient(Flags& flags, int argc, char** argv,
                                   const char* command, size_t min_positional,
                                   size_t max_positional, int* rc);

// Parses a subcommand's flags. Returns -1 to go on; otherwise the exit status
// to return at once (after printing --help, or the usage error).
int ParseFlags(Flags& flags, int argc, char** argv, const char* command);

// Prints "meshpool <command>: <status>" to stderr; returns 2 for
// InvalidArgument (usage), 1 otherwise.
int Fail(const char* command, const absl::Status& status);

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_COMMANDS_H_
