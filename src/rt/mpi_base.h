#pragma once
// <mpi.h> without the deprecated C++ bindings, whose casts fail -Wextra -Werror; include this
// instead of <mpi.h> everywhere.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
