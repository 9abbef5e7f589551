#!/usr/bin/env bash
# run_mpi.sh N PROGRAM [ARGS...]: PROGRAM on N ranks of one machine, as the tensor-parallel tests
# need it: --oversubscribe (more ranks than this machine's cores), no binding of ranks to cores
# (they share them with each other and with the other tests), --allow-run-as-root when root (CI).
# Without mpirun the suite cannot run: exit 77 (ctest: skipped) and say why.
set -euo pipefail
n=$1
shift
if ! command -v mpirun >/dev/null 2>&1; then
  echo "skipped: mpirun not found; install Open MPI (apt install openmpi-bin libopenmpi-dev, as scripts/install-deps.sh does)"
  exit 77
fi
# Open MPI's shared-memory transport copies large messages with process_vm_readv (CMA), which a
# container without CAP_SYS_PTRACE refuses; the ranks' messages here are small, so copy via the
# shared segment always.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
flags=(--oversubscribe --bind-to none)
[[ $(id -u) == 0 ]] && flags+=(--allow-run-as-root)
exec mpirun "${flags[@]}" -np "$n" "$@"
