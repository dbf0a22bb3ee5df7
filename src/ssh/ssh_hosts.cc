#include "ssh/ssh_hosts.h"

#include <charconv>
#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "drover/environment.h"
#include "drover/resource_spec_cluster_resolver.h"
#include "os/read_file.h"

namespace drover::ssh {
namespace {

// More slots than any machine runs processes; keeps sums far from overflow.
constexpr long long kMaxSlots = 1 << 16;
// How much of a bad value an error quotes.
constexpr std::size_t kMaxQuoted = 80;

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
  return text;
}

// `text` in double quotes, shortened and with control bytes escaped, so that
// an error about garbage stays one readable line.
std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size() && i < kMaxQuoted; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > kMaxQuoted) out += "...";
  return out + "\"";
}

// A whole positive decimal integer up to kMaxSlots, else nullopt.
std::optional<int> ParseSlots(std::string_view text) {
  if (text.empty() || text.size() > 12) return std::nullopt;
  long long value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if (value < 1 || value > kMaxSlots) return std::nullopt;
  return static_cast<int>(value);
}

std::string SlotsError(std::string_view name, std::string_view value) {
  return std::string(name) + " " + Quote(value) + " is not a positive integer (1.." +
         std::to_string(kMaxSlots) + ")";
}

// Characters ssh would take as something else, or that no host name has:
// whitespace and control bytes, list and comment separators, brackets, quotes.
// A leading '-' would make ssh read the address as an option.
std::optional<std::string> CheckAddress(std::string_view address) {
  if (address.empty()) return "empty host";
  if (address.front() == '-') return "host " + Quote(address) + " starts with '-'";
  for (char c : address) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f || std::strchr(",#[]/\\\"'=`$;|&<>()", c) != nullptr) {
      return "host " + Quote(address) + " is not a host name or IP address";
    }
  }
  return std::nullopt;
}

struct HostSlots {
  std::string address;
  std::optional<int> slots;  // nullopt: not given
};

// One "HOST", "HOST:SLOTS", "[IPV6]" or "[IPV6]:SLOTS". An unbracketed text
// with more than one ':' is an IPv6 address without slots. The error is the
// bare reason; callers say where.
Result<HostSlots> ParseHostSlots(std::string_view entry) {
  HostSlots out;
  std::string_view host = entry;
  std::optional<std::string_view> slots;
  if (!entry.empty() && entry.front() == '[') {
    std::size_t close = entry.find(']');
    if (close == std::string_view::npos) {
      return Status::InvalidArgument("no ']' closes the '[' of " + Quote(entry));
    }
    host = entry.substr(1, close - 1);
    std::string_view rest = entry.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return Status::InvalidArgument("unexpected " + Quote(rest) + " after ']' in " +
                                       Quote(entry) + " (expected \":SLOTS\")");
      }
      slots = rest.substr(1);
    }
    if (host.empty()) return Status::InvalidArgument("empty host in " + Quote(entry));
  } else {
    std::size_t colon = entry.find(':');
    if (colon != std::string_view::npos && entry.find(':', colon + 1) == std::string_view::npos) {
      host = entry.substr(0, colon);
      slots = entry.substr(colon + 1);
    }
  }
  if (std::optional<std::string> bad = CheckAddress(host)) {
    return Status::InvalidArgument(*bad + (host == entry ? "" : " in " + Quote(entry)));
  }
  out.address = std::string(host);
  if (slots) {
    std::optional<int> value = ParseSlots(*slots);
    if (!value) return Status::InvalidArgument(SlotsError("slots", *slots));
    out.slots = *value;
  }
  return out;
}

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string ExpandHome(const std::string& path, const Environment& env) {
  if (path != "~" && path.rfind("~/", 0) != 0) return path;
  std::optional<std::string> home = env.Get("HOME");
  if (!home || home->empty()) return path;  // ssh reports the unexpanded path
  return *home + path.substr(1);
}

}  // namespace

Result<std::vector<SshHost>> ParseHostList(std::string_view list) {
  auto error = [&](const std::string& what) {
    return Status::InvalidArgument("host list " + Quote(list) + ": " + what);
  };
  if (Trim(list).empty()) return error("no hosts (expected HOST[:SLOTS],...)");
  std::vector<SshHost> hosts;
  std::set<std::string> seen;
  std::size_t start = 0;
  for (int index = 1;; ++index) {
    std::size_t comma = list.find(',', start);
    std::string_view raw = list.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    std::string_view entry = Trim(raw);
    std::string which = "entry " + std::to_string(index);
    if (entry.empty()) return error(which + " is empty");
    Result<HostSlots> parsed = ParseHostSlots(entry);
    if (!parsed.ok()) return error(which + " " + Quote(entry) + ": " + parsed.status().message());
    if (!seen.insert(parsed->address).second) {
      return error(which + ": host '" + parsed->address + "' is listed twice");
    }
    SshHost host;
    host.address = std::move(parsed->address);
    host.slots = parsed->slots.value_or(1);
    hosts.push_back(std::move(host));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return hosts;
}

Result<std::vector<SshHost>> ParseHostfile(std::string_view text, std::string_view source) {
  std::vector<SshHost> hosts;
  std::map<std::string, int> first_line;  // address -> line it was listed on
  int line_number = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    ++line_number;
    std::size_t newline = text.find('\n', start);
    std::string_view line = text.substr(
        start, newline == std::string_view::npos ? std::string_view::npos : newline - start);
    start = newline == std::string_view::npos ? text.size() + 1 : newline + 1;
    auto error = [&](const std::string& what) {
      return Status::InvalidArgument(std::string(source) + ":" + std::to_string(line_number) +
                                     ": " + what);
    };
    if (std::size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    // Tokens split on whitespace; "slots = 4" is one token, as Open MPI reads it.
    std::vector<std::string> tokens;
    std::string token;
    for (std::size_t i = 0; i < line.size(); ++i) {
      char c = line[i];
      if (IsSpace(c)) {
        std::size_t next = i;
        while (next < line.size() && IsSpace(line[next])) ++next;
        bool joins = (!token.empty() && token.back() == '=') ||
                     (next < line.size() && line[next] == '=' && !token.empty());
        if (!joins && !token.empty()) {
          tokens.push_back(std::move(token));
          token.clear();
        }
        i = next - 1;
      } else {
        token += c;
      }
    }
    if (!token.empty()) tokens.push_back(std::move(token));
    if (tokens.empty()) continue;

    Result<HostSlots> parsed = ParseHostSlots(tokens[0]);
    if (!parsed.ok()) return error(parsed.status().message());
    std::optional<int> slots = parsed->slots;
    std::optional<int> max_slots;
    for (std::size_t i = 1; i < tokens.size(); ++i) {
      std::string_view t = tokens[i];
      std::size_t equals = t.find('=');
      std::string_view name = t.substr(0, equals);
      if (equals == std::string_view::npos || (name != "slots" && name != "max_slots")) {
        return error("unknown " + Quote(t) + " after host '" + parsed->address +
                     "' (expected slots=N or max_slots=N)");
      }
      std::string_view value = t.substr(equals + 1);
      std::optional<int> number = ParseSlots(value);
      if (!number) return error(SlotsError(name, value));
      std::optional<int>& field = name == "slots" ? slots : max_slots;
      if (field) return error(std::string(name) + " is given twice for '" + parsed->address + "'");
      field = number;
    }
    if (slots && max_slots && *max_slots < *slots) {
      return error("max_slots=" + std::to_string(*max_slots) + " is less than slots=" +
                   std::to_string(*slots) + " for '" + parsed->address + "'");
    }
    auto [it, inserted] = first_line.emplace(parsed->address, line_number);
    if (!inserted) {
      return error("host '" + parsed->address + "' is listed twice (first on line " +
                   std::to_string(it->second) + ")");
    }
    SshHost host;
    host.address = std::move(parsed->address);
    host.slots = slots.value_or(1);
    hosts.push_back(std::move(host));
  }
  if (hosts.empty()) {
    return Status::InvalidArgument(std::string(source) +
                                   ": no hosts (every line is blank or a comment)");
  }
  return hosts;
}

Result<std::vector<SshHost>> HostsFromResourceSpec(std::string_view yaml, std::string_view source,
                                                   const Environment& env) {
  DROVER_ASSIGN_OR_RETURN(ResourceSpec spec, ParseResourceSpec(yaml, source));
  std::vector<SshHost> hosts;
  for (const ResourceNode& node : spec.nodes) {
    SshHost host;
    host.address = node.address;
    host.gpus = node.gpus;
    host.slots = node.gpus.empty() ? 1 : static_cast<int>(node.gpus.size());
    host.chief = node.chief;
    if (!node.ssh_config.empty()) {
      // ParseResourceSpec checked that every ssh_config names an entry.
      const SshConfig& config = spec.ssh_configs.at(node.ssh_config);
      host.username = config.username;
      host.port = config.port;
      host.key_file = ExpandHome(config.key_file, env);
      host.python_venv = config.python_venv;
      host.env = config.env;
    }
    hosts.push_back(std::move(host));
  }
  return hosts;
}

Result<std::vector<SshHost>> LoadHosts(const std::string& value, const Environment& env) {
  std::error_code ec;
  std::filesystem::file_status status = std::filesystem::status(value, ec);
  bool yaml = EndsWith(value, ".yml") || EndsWith(value, ".yaml");
  if (!ec && std::filesystem::exists(status) && !std::filesystem::is_directory(status)) {
    DROVER_ASSIGN_OR_RETURN(std::string text,
                            os::ReadFileCapped(value, kMaxResourceSpecBytes, "hosts file"));
    if (yaml) return HostsFromResourceSpec(text, value, env);
    return ParseHostfile(text, value);
  }
  // No host name holds a '/', and none ends in .yml: the user meant a file.
  if (value.find('/') != std::string::npos || yaml) {
    std::string why = ec                                      ? ec.message()
                      : std::filesystem::is_directory(status) ? "it is a directory"
                                                              : "No such file or directory";
    return Status::IoError("cannot open hosts file '" + value + "': " + why);
  }
  return ParseHostList(value);
}

int TotalSlots(const std::vector<SshHost>& hosts) {
  long long total = 0;
  for (const SshHost& host : hosts) total += host.slots;
  return total > INT_MAX ? INT_MAX : static_cast<int>(total);
}

}  // namespace drover::ssh
