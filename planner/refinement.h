// The search's second pass (planner/search.h): each kept candidate's every stage, and the
// refiner's pipeline time, computed on several threads. Internal to the planner.
#pragma once

#include <vector>

#include "planner/search.h"

namespace ptdp::planner {

// True when `o` has a refiner (SearchOptions::refiner or make_refiner).
bool Refines(const SearchOptions& o);

// Candidate `c` with every stage evaluated (memory of each) and, when `refiner` is given, its
// pipeline time replaced by the refiner's (the closed form's kept beside it). A refined one is
// left as it is. Errors: the refiner's, prefixed with the layout.
Status Finish(const ModelSpec& m, const ClusterSpec& cluster, const Refiner* refiner, Candidate* c);

// Finish on candidates[0..k) with o's refiner, on o.threads threads, each with its own refiner
// (o.make_refiner) or sharing o.refiner. Each candidate is written by one thread and the error
// returned is the one of the first candidate that failed, so the result does not depend on the
// thread count. Layouts of one pipeline shape go to one thread in a row (a refiner that caches a
// shape's schedule keeps it).
Status FinishAll(const ModelSpec& m, const ClusterSpec& cluster, const SearchOptions& o,
                 std::vector<Candidate>* candidates, size_t k);

}  // namespace ptdp::planner
