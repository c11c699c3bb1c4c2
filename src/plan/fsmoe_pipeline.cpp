#include "plan/fsmoe_pipeline.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/optional_library.h"

#if MOECOMM_HAVE_NLOPT
#include <nlopt.hpp>
#endif

namespace moecomm::plan {

namespace {

#if MOECOMM_HAVE_NLOPT
// Forward-mode dual number (value and d/dr). The case formulas and the conditions are written
// once as templates; with Dual they also give SLSQP exact derivatives in r.
struct Dual {
  double v = 0.0;
  double d = 0.0;
  Dual(double value, double deriv = 0.0) : v(value), d(deriv) {}  // implicit: constants
};
Dual operator+(Dual a, Dual b) {
  return {a.v + b.v, a.d + b.d};
}
Dual operator-(Dual a, Dual b) {
  return {a.v - b.v, a.d - b.d};
}
Dual operator*(Dual a, Dual b) {
  return {a.v * b.v, a.d * b.v + a.v * b.d};
}
Dual operator/(Dual a, Dual b) {
  return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)};
}
#endif  // MOECOMM_HAVE_NLOPT

// FSMoE Eq. 1: a chunk of an r-way split carries n / r.
template <class T>
T chunk(const cost::AlphaBeta& ab, double n, T r) {
  return ab.alpha + n / r * ab.beta;
}

template <class T>
struct Chunks {
  T a2a, ag, rs, exp;
};

template <class T>
Chunks<T> chunks(const FsmoeLayerModel& m, T r) {
  return {chunk(m.a2a, m.n_a2a, r), chunk(m.ag, m.n_ag, r), chunk(m.rs, m.n_rs, r),
          chunk(m.exp, m.n_exp, r)};
}

// Left side minus right side of Q1..Q7 (FSMoE Sec. 4.2): Qk holds iff margin k > 0.
template <class T>
std::array<T, 7> margins(const FsmoeLayerModel& m, T r) {
  const Chunks<T> c = chunks(m, r);
  const T ends = c.ag + c.rs;                 // first chunk's AllGather + last's ReduceScatter
  const T a2a_mid = 2.0 * (r - 1.0) * c.a2a;  // AlltoAlls inside the pipeline body
  const T exp_all = r * c.exp;
  return {c.a2a - c.ag,                               // Q1
          exp_all - a2a_mid,                          // Q2
          exp_all - (r - 1.0) * ends,                 // Q3
          m.t_gar - ends,                             // Q4
          m.t_gar - (exp_all - a2a_mid + ends),       // Q5
          m.t_gar - (r * c.ag + r * c.rs - a2a_mid),  // Q6
          m.t_gar - (ends + exp_all - a2a_mid)};      // Q7
}

// The four case formulas, in chunk-time form (FSMoE Eq. 2 and Sec. 4.2 Case2-4).
template <class T>
std::array<T, 4> case_times(const FsmoeLayerModel& m, T r) {
  const Chunks<T> c = chunks(m, r);
  return {2.0 * r * c.a2a + m.t_gar,              // Case1: inter-node link is the bottleneck
          2.0 * c.a2a + c.ag + c.rs + r * c.exp,  // Case2: experts
          2.0 * r * c.a2a + c.ag + c.rs,          // Case3: AlltoAll
          2.0 * c.a2a + r * c.ag + r * c.rs};     // Case4: intra-node collectives
}

int index_of(FsmoeCase c) {
  return static_cast<int>(c) - 1;
}

// One conjunction of the case table: sign +1 means Qk must hold, -1 must not, 0 is free.
struct Clause {
  FsmoeCase which;
  std::array<int, 7> sign;
};

// FSMoE Sec. 4.2, the four cases written as eight conjunctions (Case1 has four, Case2 two).
constexpr std::array<Clause, 8> kClauses{
    {{FsmoeCase::k1, {+1, -1, 0, +1, 0, 0, 0}},    // Q1 & !Q2 & Q4
     {FsmoeCase::k1, {+1, +1, 0, 0, +1, 0, 0}},    // Q1 & Q2 & Q5
     {FsmoeCase::k1, {-1, 0, -1, 0, 0, +1, 0}},    // !Q1 & !Q3 & Q6
     {FsmoeCase::k1, {-1, 0, +1, 0, 0, 0, +1}},    // !Q1 & Q3 & Q7
     {FsmoeCase::k2, {+1, +1, 0, 0, -1, 0, 0}},    // Q1 & Q2 & !Q5
     {FsmoeCase::k2, {-1, 0, +1, 0, 0, 0, -1}},    // !Q1 & Q3 & !Q7
     {FsmoeCase::k3, {+1, -1, 0, -1, 0, 0, 0}},    // Q1 & !Q2 & !Q4
     {FsmoeCase::k4, {-1, 0, -1, 0, 0, -1, 0}}}};  // !Q1 & !Q3 & !Q6

std::array<bool, 7> as_array(const FsmoeConditions& q) {
  return {q.q1, q.q2, q.q3, q.q4, q.q5, q.q6, q.q7};
}

bool clause_holds(const Clause& c, const std::array<bool, 7>& q) {
  for (int k = 0; k < 7; ++k) {
    if (c.sign[k] != 0 && q[k] != (c.sign[k] > 0)) return false;
  }
  return true;
}

// The clauses split on Q1, then on Q2 (Q1) or Q3 (!Q1), then on one of Q4-Q7: a complete
// decision tree, so exactly one clause holds for any Q1-Q7.
FsmoeCase select(const std::array<bool, 7>& q) {
  for (const Clause& c : kClauses) {
    if (clause_holds(c, q)) return c.which;
  }
  throw std::logic_error("fsmoe case table is not exhaustive");
}

// Q1..Q7 at a real r; every condition is a strict inequality.
std::array<bool, 7> holds(const FsmoeLayerModel& m, double r) {
  const std::array<double, 7> g = margins(m, r);
  std::array<bool, 7> q{};
  for (int k = 0; k < 7; ++k) q[k] = g[k] > 0;
  return q;
}

// Unchecked model at a real r: the hot path of the degree searches.
FsmoeCase case_of(const FsmoeLayerModel& m, double r) {
  return select(holds(m, r));
}

double time_of(const FsmoeLayerModel& m, double r) {
  return case_times(m, r)[index_of(case_of(m, r))];
}

// Takes a C string so the hot path builds no message unless the check fails.
void check_finite_nonneg(double v, const char* where) {
  if (!std::isfinite(v) || v < 0.0) {
    throw Error(where, "must be finite and >= 0, got " + std::to_string(v));
  }
}

void check_degree(int r) {
  if (r < 1) throw Error("fsmoe pipeline", "degree r must be >= 1, got " + std::to_string(r));
}

// A layer cannot be cut into more chunks than it has tokens; the cap keeps the exact scan
// (and its int counter) bounded when every start-up is zero.
constexpr int kFsmoeMaxDegreeCap = 1 << 20;

void check_max_degree(int max_degree) {
  if (max_degree < 1 || max_degree > kFsmoeMaxDegreeCap) {
    throw Error("fsmoe pipeline", "max_degree must be in [1, " +
                                      std::to_string(kFsmoeMaxDegreeCap) + "], got " +
                                      std::to_string(max_degree));
  }
}

// ---- Algorithm 1 as published: SLSQP per clause ----
#if MOECOMM_HAVE_NLOPT

struct RelaxedSearch {
  const FsmoeLayerModel* m;
  const Clause* clause;
  double scale;  // a time unit so that SLSQP works on O(1) numbers
  double best_time = std::numeric_limits<double>::infinity();
  double best_r = 1.0;
};

struct ConstraintRef {
  RelaxedSearch* search;
  int k;  // which of Q1..Q7
};

// Conditions as NLopt constraints g(r) <= 0; strict inequalities are relaxed to non-strict.
template <class T>
T violation(const RelaxedSearch& s, int k, T r) {
  return margins(*s.m, r)[k] * static_cast<double>(-s.clause->sign[k]);
}

bool clause_feasible(const RelaxedSearch& s, double r) {
  for (int k = 0; k < 7; ++k) {
    if (s.clause->sign[k] != 0 && violation(s, k, r) > 1e-9 * s.scale) return false;
  }
  return true;
}

double relaxed_objective(const std::vector<double>& x, std::vector<double>& grad, void* data) {
  auto* s = static_cast<RelaxedSearch*>(data);
  const Dual t = case_times(*s->m, Dual(x[0], 1.0))[index_of(s->clause->which)];
  if (!grad.empty()) grad[0] = t.d / s->scale;
  // SLSQP may end on a slightly infeasible point or stop on round-off; keeping the best
  // feasible point it visited makes the result independent of how it stops.
  if (t.v < s->best_time && clause_feasible(*s, x[0])) {
    s->best_time = t.v;
    s->best_r = x[0];
  }
  return t.v / s->scale;
}

double relaxed_constraint(const std::vector<double>& x, std::vector<double>& grad, void* data) {
  const auto* c = static_cast<const ConstraintRef*>(data);
  const Dual g = violation(*c->search, c->k, Dual(x[0], 1.0));
  if (!grad.empty()) grad[0] = g.d / c->search->scale;
  return g.v / c->search->scale;
}

void run_slsqp(RelaxedSearch& s, double start, int max_degree) {
  nlopt::opt opt(nlopt::LD_SLSQP, 1);
  opt.set_lower_bounds(1.0);
  opt.set_upper_bounds(static_cast<double>(max_degree));
  opt.set_min_objective(relaxed_objective, &s);
  std::vector<ConstraintRef> refs;
  refs.reserve(7);
  for (int k = 0; k < 7; ++k) {
    if (s.clause->sign[k] != 0) refs.push_back({&s, k});
  }
  for (ConstraintRef& ref : refs) opt.add_inequality_constraint(relaxed_constraint, &ref, 1e-12);
  opt.set_xtol_rel(1e-12);
  opt.set_maxeval(100);
  std::vector<double> x{start};
  double f = 0.0;
  try {
    opt.optimize(x, f);
  } catch (const std::runtime_error&) {
    // Round-off or a failed line search: the best feasible point seen is already recorded.
  }
}

// Start points: a geometric spread over [1, max_degree] plus the exact integer optimum, so
// every region of a case that contains one of them is explored and the relaxation is never
// worse than the integer answer.
std::vector<double> start_points(int max_degree, int r_exact) {
  std::vector<double> starts{1.0, static_cast<double>(max_degree), static_cast<double>(r_exact)};
  constexpr int kSpread = 16;
  for (int i = 1; i < kSpread; ++i) {
    starts.push_back(std::pow(static_cast<double>(max_degree), i / static_cast<double>(kSpread)));
  }
  return starts;
}

#endif  // MOECOMM_HAVE_NLOPT

}  // namespace

void fsmoe_validate(const FsmoeLayerModel& m) {
  check_finite_nonneg(m.a2a.alpha, "FsmoeLayerModel.a2a.alpha");
  check_finite_nonneg(m.a2a.beta, "FsmoeLayerModel.a2a.beta");
  check_finite_nonneg(m.ag.alpha, "FsmoeLayerModel.ag.alpha");
  check_finite_nonneg(m.ag.beta, "FsmoeLayerModel.ag.beta");
  check_finite_nonneg(m.rs.alpha, "FsmoeLayerModel.rs.alpha");
  check_finite_nonneg(m.rs.beta, "FsmoeLayerModel.rs.beta");
  check_finite_nonneg(m.exp.alpha, "FsmoeLayerModel.exp.alpha");
  check_finite_nonneg(m.exp.beta, "FsmoeLayerModel.exp.beta");
  check_finite_nonneg(m.n_a2a, "FsmoeLayerModel.n_a2a");
  check_finite_nonneg(m.n_ag, "FsmoeLayerModel.n_ag");
  check_finite_nonneg(m.n_rs, "FsmoeLayerModel.n_rs");
  check_finite_nonneg(m.n_exp, "FsmoeLayerModel.n_exp");
  check_finite_nonneg(m.t_gar, "FsmoeLayerModel.t_gar");
}

FsmoeChunkTimes fsmoe_chunk_times(const FsmoeLayerModel& m, int r) {
  fsmoe_validate(m);
  check_degree(r);
  const Chunks<double> c = chunks(m, static_cast<double>(r));
  return {c.a2a, c.ag, c.rs, c.exp};
}

FsmoeConditions fsmoe_conditions(const FsmoeLayerModel& m, int r) {
  fsmoe_validate(m);
  check_degree(r);
  const std::array<bool, 7> q = holds(m, r);
  return {q[0], q[1], q[2], q[3], q[4], q[5], q[6]};
}

FsmoeCase fsmoe_select_case(const FsmoeConditions& q) {
  return select(as_array(q));
}

double fsmoe_case_time(const FsmoeLayerModel& m, FsmoeCase c, int r) {
  fsmoe_validate(m);
  check_degree(r);
  return case_times(m, static_cast<double>(r))[index_of(c)];
}

FsmoeCase fsmoe_case_at(const FsmoeLayerModel& m, int r) {
  fsmoe_validate(m);
  check_degree(r);
  return case_of(m, r);
}

double fsmoe_layer_time(const FsmoeLayerModel& m, int r) {
  fsmoe_validate(m);
  check_degree(r);
  return time_of(m, r);
}

double fsmoe_layer_time_relaxed(const FsmoeLayerModel& m, double r) {
  fsmoe_validate(m);
  if (!(r >= 1.0) || !std::isfinite(r)) {
    throw Error("fsmoe pipeline", "degree r must be finite and >= 1, got " + std::to_string(r));
  }
  return time_of(m, r);
}

double fsmoe_overlappable_time(const FsmoeLayerModel& m, int r) {
  fsmoe_validate(m);
  FsmoeLayerModel quiet = m;
  quiet.t_gar = 0.0;
  // FSMoE Sec. 5.2 lists t_olp,moe for Case2 (r t_exp + t_ag + t_rs - 2(r-1) t_a2a), Case3
  // (t_ag + t_rs) and Case4 (r t_ag + r t_rs - 2(r-1) t_a2a). Each is the case's time minus
  // 2 r t_a2a, the time the inter-node link is busy with AlltoAll: the link's idle time, which
  // an AllReduce can fill. Written that way it also covers Case1, where the link has none.
  const double busy = 2.0 * r * fsmoe_chunk_times(quiet, r).a2a;
  return std::max(0.0, fsmoe_layer_time(quiet, r) - busy);
}

FsmoeIntegerDegree fsmoe_optimal_integer_degree(const FsmoeLayerModel& m, int max_degree) {
  fsmoe_validate(m);
  check_max_degree(max_degree);
  // Bound on the scan. In every case T(r) >= max(t1(r), t2(r)) (each clause of the case table
  // picks the largest of t1, t2 and t3 (Q1) or t4 (!Q1): Q2 compares t2 with t3, Q3 t2 with
  // t4, Q4-Q7 t1 with the other winner). Since t1 >= 2 r alpha_a2a and t2 >= r alpha_exp,
  // T(r) >= r * slope; once r * slope >= the best time found, no larger r can beat it.
  const double slope = std::max(2.0 * m.a2a.alpha, m.exp.alpha);
  FsmoeIntegerDegree best{1, time_of(m, 1), case_of(m, 1)};
  for (int r = 2; r <= max_degree && r * slope < best.time; ++r) {
    const double t = time_of(m, r);
    if (t < best.time) best = {r, t, case_of(m, r)};
  }
  return best;
}

FsmoeRelaxedDegree fsmoe_relaxed_degree(const FsmoeLayerModel& m, int max_degree) {
#if !MOECOMM_HAVE_NLOPT
  static_cast<void>(m);
  static_cast<void>(max_degree);
  throw core::missing_library("plan", "FSMoE's relaxed pipeline degree (Algorithm 1, SLSQP)",
                              core::OptionalLibrary::kNlopt);
#else
  const FsmoeIntegerDegree exact = fsmoe_optimal_integer_degree(m, max_degree);
  FsmoeRelaxedDegree out{1.0, exact.time, exact.which, exact.r, exact.time};
  if (max_degree == 1) return out;
  const double scale = std::max(time_of(m, 1), std::numeric_limits<double>::min());
  double best = std::numeric_limits<double>::infinity();
  // Algorithm 1 lines 1-8: solve each case (here, each conjunction of it), keep the smallest.
  for (const Clause& clause : kClauses) {
    RelaxedSearch s{&m, &clause, scale};
    for (double start : start_points(max_degree, exact.r)) run_slsqp(s, start, max_degree);
    if (s.best_time < best) {
      best = s.best_time;
      out.r = s.best_r;
      out.time = s.best_time;
      out.which = clause.which;
    }
  }
  const int lo = std::clamp(static_cast<int>(std::floor(out.r)), 1, max_degree);
  const int hi = std::clamp(static_cast<int>(std::ceil(out.r)), 1, max_degree);
  const double t_lo = time_of(m, lo);
  const double t_hi = time_of(m, hi);
  out.r_rounded = t_hi < t_lo ? hi : lo;
  out.time_rounded = std::min(t_lo, t_hi);
  return out;
#endif
}

FsmoeDegree fsmoe_optimal_degree(const FsmoeLayerModel& m, int max_degree) {
  return {fsmoe_optimal_integer_degree(m, max_degree), fsmoe_relaxed_degree(m, max_degree)};
}

FsmoeLayerModel fsmoe_forward_model(FsmoeLayerModel forward) {
  forward.t_gar = 0.0;
  fsmoe_validate(forward);
  return forward;
}

FsmoeLayerModel fsmoe_backward_model(const FsmoeLayerModel& forward, double t_gar) {
  check_finite_nonneg(t_gar, "fsmoe backward t_gar");
  FsmoeLayerModel backward = forward;
  // Sec. 4.4 says alpha_exp, beta_exp and n_exp are all twice the forward ones; doubling all
  // three would make the per-chunk expert time 2 alpha + 4 n beta / r. Twice the GEMMs is
  // twice the start-ups and twice the workload at the same per-unit rate.
  backward.exp.alpha *= 2.0;
  backward.n_exp *= 2.0;
  backward.t_gar = t_gar;
  fsmoe_validate(backward);
  return backward;
}

FsmoePhaseDegrees fsmoe_plan_phases(const FsmoeLayerModel& forward, double backward_t_gar,
                                    int max_degree) {
  return {fsmoe_optimal_degree(fsmoe_forward_model(forward), max_degree),
          fsmoe_optimal_degree(fsmoe_backward_model(forward, backward_t_gar), max_degree)};
}

}  // namespace moecomm::plan
