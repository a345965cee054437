#pragma once
// A test fixture: saves the whole environment, clears every launcher variable (and
// TUTTI_SPAWN_GRACE_MS), and restores it all on exit, so that a case sees only the variables
// it sets — and tutti::spawn forks — even when the tests themselves run under srun or mpirun.

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <tutti/bootstrap/env.hpp>

extern char** environ;

class scoped_env {
 public:
  scoped_env() {
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) saved_.emplace_back(*e);
    for (const char* var : tutti::detail::launcher_variables) ::unsetenv(var);
    ::unsetenv("TUTTI_SPAWN_GRACE_MS");
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;
  ~scoped_env() {
    ::clearenv();
    for (const auto& entry : saved_) {
      const auto eq = entry.find('=');
      ::setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 1);
    }
  }
  void set(const char* name, const char* value) { ::setenv(name, value, 1); }
  void set(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) ::setenv(name, value, 1);
  }
  void unset(const char* name) { ::unsetenv(name); }
  /// TUTTI_GLOO_CMA for the ranks started next: "0" (every message on Gloo's TCP pairs), or
  /// unset (single copies between ranks on this host, where it allows them).
  void gloo_tcp_only(bool on) {
    if (on)
      set("TUTTI_GLOO_CMA", "0");
    else
      unset("TUTTI_GLOO_CMA");
  }

 private:
  std::vector<std::string> saved_;
};
