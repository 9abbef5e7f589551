#include "parallel/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"

#if defined(JOURNEY_HAVE_MPI)
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#endif

namespace journey {

namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string transport() const override { return "single process"; }
  void all_reduce_sum(float*, int64_t n) override {
    counters_.all_reduces += 1;
    counters_.all_reduce_bytes += n * int64_t(sizeof(float));
  }
  void gather_columns(float* out, const float* mine, int64_t rows, int64_t cols) override {
    counters_.gathers += 1;
    if (out != mine) std::memcpy(out, mine, size_t(rows * cols) * sizeof(float));
  }
  void broadcast(void*, int64_t n) override {
    counters_.broadcasts += 1;
    counters_.broadcast_bytes += n;
  }
  [[noreturn]] void abort(int status) override { std::exit(status); }
};

#if defined(JOURNEY_HAVE_MPI)

// MPI counts in int: a payload over 2^31 - 1 elements would need chunking, and no call of the
// forward pass comes near it (N * E floats of one step); refuse rather than truncate.
int mpi_count(int64_t n, const char* what) {
  if (n < 0 || n > int64_t(0x7fffffff)) fail("MPI ", what, ": ", n, " elements do not fit MPI's int count");
  return int(n);
}

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail(call, " failed: ", std::string(text, size_t(length)));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // MPI_Init starts Open MPI's own threads, which inherit this thread's signal mask. With
      // every signal blocked while they start, a SIGTERM or Ctrl-C is never delivered to one of
      // them (where its default action would end the process) but to a thread of ours: the
      // server's sigwait thread, which shuts down cleanly.
      sigset_t all, previous;
      sigfillset(&all);
      pthread_sigmask(SIG_BLOCK, &all, &previous);
      int provided = 0;
      const int status = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      check(status, "MPI_Init_thread");
      if (provided < MPI_THREAD_SERIALIZED)
        fail("MPI_Init_thread: the MPI library gives thread level ", provided, ", journey needs MPI_THREAD_SERIALIZED (",
             int(MPI_THREAD_SERIALIZED), "): the server calls the backend from more than one thread, one at a time");
      owns_init_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string v(version, size_t(length));
    transport_ = "MPI (" + v.substr(0, v.find_first_of(",\n")) + ")";
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_init_ && !finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string transport() const override { return transport_; }

  void all_reduce_sum(float* data, int64_t n) override {
    check(MPI_Allreduce(MPI_IN_PLACE, data, mpi_count(n, "all-reduce"), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
          "MPI_Allreduce");
    counters_.all_reduces += 1;
    counters_.all_reduce_bytes += n * int64_t(sizeof(float));
  }

  void gather_columns(float* out, const float* mine, int64_t rows, int64_t cols) override {
    const int count = mpi_count(rows * cols, "gather");
    if (rank_ != 0) {
      check(MPI_Gather(mine, count, MPI_FLOAT, nullptr, 0, MPI_FLOAT, 0, MPI_COMM_WORLD), "MPI_Gather");
      return;
    }
    staging_.resize(size_t(rows * cols * size_));  // [size, rows, cols] as MPI delivers it
    check(MPI_Gather(mine, count, MPI_FLOAT, staging_.data(), count, MPI_FLOAT, 0, MPI_COMM_WORLD), "MPI_Gather");
    for (int r = 0; r < size_; ++r)
      for (int64_t row = 0; row < rows; ++row)
        std::memcpy(out + row * cols * size_ + r * cols, staging_.data() + (r * rows + row) * cols,
                    size_t(cols) * sizeof(float));
    counters_.gathers += 1;
    counters_.gather_bytes += rows * cols * (size_ - 1) * int64_t(sizeof(float));
  }

  // A blocking MPI_Bcast polls at full speed (Open MPI's progress loop) for as long as rank 0 is
  // idle: a whole core per follower while a server waits for requests. The followers poll the
  // non-blocking form instead, sleeping between tests once the wait has lasted a millisecond (so a
  // decode step, which arrives within microseconds, does not pay for the sleep). Rank 0 must use
  // the non-blocking form too: MPI never matches a blocking collective with a non-blocking one.
  void broadcast(void* bytes, int64_t n) override {
    MPI_Request request;
    check(MPI_Ibcast(bytes, mpi_count(n, "broadcast"), MPI_BYTE, 0, MPI_COMM_WORLD, &request), "MPI_Ibcast");
    counters_.broadcasts += 1;
    counters_.broadcast_bytes += n;
    if (rank_ == 0) {
      check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    auto pause = std::chrono::microseconds(50);
    for (int done = 0;;) {
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) break;
      if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1)) continue;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
  }

  [[noreturn]] void abort(int status) override {
    MPI_Abort(MPI_COMM_WORLD, status);
    std::exit(status);
  }

 private:
  int rank_ = 0, size_ = 1;
  bool owns_init_ = false;
  std::string transport_;
  std::vector<float> staging_;  // [size, rows, cols] rank 0's receive buffer of gather_columns
};

#endif

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

bool mpi_compiled_in() {
#if defined(JOURNEY_HAVE_MPI)
  return true;
#else
  return false;
#endif
}

int launcher_world_size() {
  // Open MPI's mpirun, then the PMI variables of MPICH / Slurm launchers.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* value = std::getenv(name)) {
      const int n = std::atoi(value);
      if (n > 0) return n;
    }
  return 1;
}

Communicator& mpi_world() {
#if defined(JOURNEY_HAVE_MPI)
  static MpiCommunicator world;  // MPI_Finalize at exit, after every backend using it is gone
  return world;
#else
  fail("--tensor-parallel: this journey was built without MPI (find_package(MPI) found none when it was configured); "
       "install Open MPI (apt install libopenmpi-dev openmpi-bin, as scripts/install-deps.sh does) and configure again");
#endif
}

}  // namespace journey
