#!/usr/bin/env bash
# Runs a command (an mpirun line) with its own OpenMPI session folder (mpi_session.sh says why).
# usage: with_mpi_session.sh COMMAND [ARGS...]
. "$(dirname "$0")/mpi_session.sh"
"$@"
