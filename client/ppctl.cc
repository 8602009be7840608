// ppctl: the pipeline service's command-line client. `ppctl --help` lists the commands.
#include "client/command.h"

int main(int argc, char** argv) {
  const std::vector<pp::client::Command> commands = {
      pp::client::PlanCommand(),
  };
  return pp::client::RunPpctl(commands, argc, argv);
}
