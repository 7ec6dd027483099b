// When to checkpoint: optimum intervals from the checkpoint cost and the mean time between
// failures. Pure functions, shared with skt-model.
#pragma once

namespace skt {

// Young's first-order optimum: sqrt(2 δ M).
double young_interval(double cost, double mtbf) noexcept;

// Daly's higher-order optimum (Daly 2006, eq. 37): for δ < 2M,
//   τ = sqrt(2δM)·[1 + (1/3)·sqrt(δ/(2M)) + (1/9)·(δ/(2M))] − δ,
// and τ = M otherwise.
double daly_interval(double cost, double mtbf) noexcept;

}  // namespace skt
