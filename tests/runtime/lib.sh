# Sourced by the MPI shell tests of tests/runtime (`. "$(dirname "$0")/lib.sh"`, before any cd):
# what every mpirun there needs, in one place.
# OpenMPI refuses root without both variables (the test machines run as root); the tests start
# more ranks than the machine has cores (8 on 2), which OpenMPI refuses unless oversubscription
# is allowed, and ranks that yield the core while they wait let the oversubscribed ones progress.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# One node's shared memory: OpenMPI's ob1 over vader (and self), named so that each of the
# hundreds of short jobs here does not probe UCX and the network first. On this 2-core machine
# that halved a job's start (8 ranks, MPI_Init to MPI_Finalize: 0.42 s against 0.22 s).
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
# Its own folder for OpenMPI's session files (mpi_session.sh says why).
. "$(dirname "${BASH_SOURCE[0]}")/../mpi_session.sh"

# One line naming what failed, exit 1.
fail() { echo "FAIL: $*"; exit 1; }

# Makes $work/NAME afresh, enters it (as $dir) and tokenizes a text into data.bin there: the GPL-3
# the Debian base image ships, else this folder's CMakeLists.txt. Needs $ptdp, $work and $here.
fresh_dir_with_data() {  # NAME
  dir="$work/$1"
  rm -rf "$dir"
  mkdir -p "$dir"
  cd "$dir" || exit 1
  local text=/usr/share/common-licenses/GPL-3
  [ -f "$text" ] || text="$here/CMakeLists.txt"
  "$ptdp" tokenize --in "$text" --out data.bin > /dev/null || fail "tokenize"
}
