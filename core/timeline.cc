// Filled by the work that owns it (see core/timeline.h).
#include "core/timeline.h"
