#include "libselfckpt/src/policy.hpp"

#include <cmath>

namespace skt {

double young_interval(double cost, double mtbf) noexcept {
  return std::sqrt(2.0 * cost * mtbf);
}

double daly_interval(double cost, double mtbf) noexcept {
  if (cost >= 2.0 * mtbf) return mtbf;
  const double ratio = cost / (2.0 * mtbf);
  return std::sqrt(2.0 * cost * mtbf) * (1.0 + std::sqrt(ratio) / 3.0 + ratio / 9.0) - cost;
}

}  // namespace skt
