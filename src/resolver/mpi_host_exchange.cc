// The MPI implementation of HostExchange. Compiled only when DROVER_WITH_MPI
// is defined (see CMakeLists.txt); mpi_cluster_resolver.cc holds the stubs
// used otherwise.

// Only the C API: we link MPI::MPI_C, and Open MPI's and MPICH's mpi.h pull in
// their deprecated C++ bindings (a separate library) unless told not to.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "drover/mpi_cluster_resolver.h"

namespace drover {
namespace {

Mutex g_init_mutex;
bool g_we_initialized GUARDED_BY(g_init_mutex) = false;

void FinalizeMpiAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string MpiError(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, length);
}

// Initializes MPI once unless the program (or mpi4py) already did. Only the
// initializer may finalize, so the exit hook is ours only when we initialized.
Status EnsureMpiInitialized() {
  MutexLock lock(g_init_mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return Status::Unavailable("MPI was already finalized");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return Status::Ok();
  int provided = 0;
  int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) return Status::Unavailable("MPI_Init_thread failed: " + MpiError(rc));
  if (!g_we_initialized) {
    g_we_initialized = true;
    std::atexit(FinalizeMpiAtExit);
  }
  return Status::Ok();
}

class MpiHostExchange : public HostExchange {
 public:
  Result<std::vector<std::string>> AllgatherHostNames(const std::string& own, int rank,
                                                      int size) override {
    DROVER_RETURN_IF_ERROR(EnsureMpiInitialized());
    // A private communicator, so our error handler and traffic never touch
    // the program's MPI_COMM_WORLD.
    MPI_Comm comm = MPI_COMM_NULL;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    if (rc != MPI_SUCCESS) return Status::Unavailable("MPI_Comm_dup failed: " + MpiError(rc));
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    Result<std::vector<std::string>> result = Gather(comm, own, rank, size);
    MPI_Comm_free(&comm);
    return result;
  }

 private:
  static Result<std::vector<std::string>> Gather(MPI_Comm comm, const std::string& own, int rank,
                                                 int size) {
    int world_size = 0;
    int world_rank = 0;
    MPI_Comm_size(comm, &world_size);
    MPI_Comm_rank(comm, &world_rank);
    if (world_size != size || world_rank != rank) {
      return Status::InvalidArgument(
          "MPI_COMM_WORLD has " + std::to_string(world_size) + " rank(s) (this is rank " +
          std::to_string(world_rank) + ") but the launcher's variables say " +
          std::to_string(size) + " (rank " + std::to_string(rank) +
          "): the program was probably started by a different MPI's launcher than the one "
          "drover was built against (e.g. an Open MPI build under MPICH's mpiexec sees a world "
          "of 1); start it with that MPI's mpirun");
    }
    int length = static_cast<int>(own.size());
    std::vector<int> lengths(size);
    int rc = MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm);
    if (rc != MPI_SUCCESS) return Status::Unavailable("MPI_Allgather failed: " + MpiError(rc));
    std::vector<int> offsets(size);
    long long total = 0;
    for (int r = 0; r < size; ++r) {
      if (lengths[r] < 0 || total + lengths[r] > (1 << 30)) {
        return Status::Internal("rank " + std::to_string(r) + " sent a bad host name length");
      }
      offsets[r] = static_cast<int>(total);
      total += lengths[r];
    }
    std::vector<char> buffer(static_cast<std::size_t>(total) + 1);
    rc = MPI_Allgatherv(own.data(), length, MPI_CHAR, buffer.data(), lengths.data(), offsets.data(),
                        MPI_CHAR, comm);
    if (rc != MPI_SUCCESS) return Status::Unavailable("MPI_Allgatherv failed: " + MpiError(rc));
    std::vector<std::string> hosts;
    hosts.reserve(size);
    for (int r = 0; r < size; ++r) hosts.emplace_back(buffer.data() + offsets[r], lengths[r]);
    return hosts;
  }
};

}  // namespace

bool HaveMpiHostExchange() {
  return true;
}

std::shared_ptr<HostExchange> NewMpiHostExchange() {
  return std::make_shared<MpiHostExchange>();
}

}  // namespace drover
