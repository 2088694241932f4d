// A fixture: `ptdp train` may not use the planner.
#include "planner/search.h"
