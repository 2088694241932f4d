# Sourced by every test script that starts mpirun (and run by with_mpi_session.sh for the tests
# that call mpirun from CMake): gives the script its own folder for OpenMPI's session files.
# OpenMPI 4.1's mpirun makes /tmp/ompi.<host>.<uid> when it starts and removes it, if empty,
# when it ends. Under `ctest -j` one job's removal can fall between another's mkdir and stat,
# and that job stops in orte_init ("A call to mkdir was unable to create the desired directory
# ... File exists", session_dir.c; once in CI, stop 49, runtime_checkpoint_reshard_moe). With
# orte_tmpdir_base set per script, no two concurrent scripts share that folder. Its path stays
# short: OpenMPI's Unix sockets live under it, and their names are capped at 108 bytes.
ptdp_mpi_session=$(mktemp -d "${TMPDIR:-/tmp}/ptdp-mpi.XXXXXX") || exit 1
export OMPI_MCA_orte_tmpdir_base="$ptdp_mpi_session"
ptdp_mpi_session_end() { rm -rf "$ptdp_mpi_session"; }
trap ptdp_mpi_session_end EXIT
