// Filled by the work that owns it (see core/program.h).
#include "core/program.h"
