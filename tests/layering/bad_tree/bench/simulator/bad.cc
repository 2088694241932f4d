// A fixture: the simulator's benchmark may not use the planner.
#include "planner/search.h"
