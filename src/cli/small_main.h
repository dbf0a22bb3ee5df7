// The main() of drover's small binaries (drover-guard, drover-agent): one
// CLI11 app with the commands `add` puts on it, parse errors as exit code 2
// (bad input, as for drover itself).

#ifndef DROVER_CLI_SMALL_MAIN_H_
#define DROVER_CLI_SMALL_MAIN_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace drover::cli {

// `name` starts each error line, `help` is the command it points to.
inline int RunSmallBinary(int argc, char** argv, const std::string& name,
                          const std::string& description, const std::string& help,
                          const std::function<void(CLI::App&, int*)>& add) {
  CLI::App app{description};
  app.require_subcommand(1);
  app.failure_message([name, help](const CLI::App*, const CLI::Error& e) {
    return name + ": " + e.what() + " (see " + help + ")\n";
  });
  int exit_code = 0;
  add(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  return exit_code;
}

}  // namespace drover::cli

#endif  // DROVER_CLI_SMALL_MAIN_H_
