// Filled by the work that owns it (see core/hardware.h).
#include "core/hardware.h"
