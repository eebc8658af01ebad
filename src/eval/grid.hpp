// Policy grids for `steermoe sweep`: "name:key=SPEC,key=SPEC,..." where SPEC is a value, a list
// "v1|v2|v3", or an inclusive numeric range "from..to:step". Expands to the Cartesian product of
// policy strings (first key slowest), each checked by policy::parse_policy.
//   "psr:lambda=0.1..0.3:0.1,n=1|2" -> psr:lambda=0.1,n=1  psr:lambda=0.1,n=2  psr:lambda=0.2,n=1
//                                      psr:lambda=0.2,n=2  psr:lambda=0.3,n=1  psr:lambda=0.3,n=2
// Several grids: separate them with ';'. Range values print with the decimals of the range's
// numbers (0.1 + 2 * 0.1 prints as 0.3).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace steermoe::eval {

// Throws steermoe::Error ("grid: <part>: expected ...") for a malformed grid, a range with a
// non-positive step or to < from, more than 10000 points, or a policy the parser rejects.
std::vector<std::string> expand_grid(std::string_view grid);

}  // namespace steermoe::eval
