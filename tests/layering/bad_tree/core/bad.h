// A fixture: core may not include the planner.
#include "planner/planner.h"
