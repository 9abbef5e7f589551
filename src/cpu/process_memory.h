// This process's memory as the kernel counts it (/proc/self/status): what `journey bench`,
// `generate` and `serve` print after loading, and what the resident-memory test checks.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

namespace journey {

struct ProcessMemory {
  int64_t resident = -1;       // VmRSS: pages of this process in RAM now (bytes)
  int64_t resident_peak = -1;  // VmHWM: the most VmRSS has been
  int64_t resident_file = -1;  // RssFile: the part that is pages of mapped files (weights in place)
  int64_t resident_anon = -1;  // RssAnon: the part that is anonymous memory (copies, KV cache, buffers)
};

// Reads /proc/self/status; fields it cannot read stay -1 (not Linux).
inline ProcessMemory process_memory() {
  ProcessMemory m;
  std::ifstream status("/proc/self/status");
  std::string key;
  int64_t kib = 0;
  while (status >> key) {
    if (key == "VmRSS:" || key == "VmHWM:" || key == "RssFile:" || key == "RssAnon:") {
      status >> kib;
      int64_t& field = key == "VmRSS:" ? m.resident : key == "VmHWM:" ? m.resident_peak
                       : key == "RssFile:" ? m.resident_file : m.resident_anon;
      field = kib * 1024;
    }
    status.ignore(1 << 20, '\n');
  }
  return m;
}

}  // namespace journey
