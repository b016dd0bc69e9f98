// The metrics (torchmetrics.hpp), computed on 3 ranks (threads over gloo) with uneven shards,
// against scikit-learn's on the same arrays: the arrays go to a file, python3 runs accuracy_score,
// f1_score (macro, micro), roc_auc_score (binary, and multiclass ovr macro), mean_squared_error,
// and numpy's weighted average for MeanMetric.  Skipped, saying why, where python3 or
// python3-sklearn is missing (scripts/setup.sh installs it); Debian's /usr/bin/python3 is preferred.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <mutex>
#include <plrt/sdk/torchmetrics.hpp>
#include <sstream>

#include "metric_test_data.hpp"

namespace {

using namespace metric_test;

const char* kScript = R"PY(
import sys
try:
    import numpy as np
    from sklearn.metrics import accuracy_score, f1_score, roc_auc_score, mean_squared_error
except ImportError as e:
    print("SKIP", e)
    sys.exit(0)
a = {}
for line in open(sys.argv[1]):
    k, *v = line.split()
    a[k] = np.array([float(x) for x in v])
C = int(a["c"][0])
probs = a["probs"].reshape(-1, C)
t = a["target"].astype(int)
pred = probs.argmax(1)
it, ip = a["ids_target"].astype(int), a["ids_pred"].astype(int)
out = [accuracy_score(t, pred), f1_score(t, pred, average="macro"), f1_score(t, pred, average="micro"),
       roc_auc_score(t, probs, multi_class="ovr", average="macro"),
       roc_auc_score(a["btarget"].astype(int), a["bscore"]),
       mean_squared_error(a["reg_target"], a["reg_pred"]),
       np.average(a["reg_pred"], weights=a["weight"]),
       f1_score(it, ip, average="macro"), f1_score(it, ip, average="micro")]
print("OK", " ".join(repr(float(x)) for x in out))
)PY";

template <class T>
void write_line(std::ostream& o, const char* key, const std::vector<T>& v) {
  o << key;
  for (const T& x : v) o << ' ' << std::setprecision(17) << x;
  o << '\n';
}

// Runs the script on `arrays`; the words it printed.
std::vector<std::string> run_sklearn(const std::string& arrays) {
  const auto dir = std::filesystem::temp_directory_path() / ("plrt_metrics_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "check.py") << kScript;
  std::ofstream(dir / "arrays.txt") << arrays;
  const std::string cmd = std::string(PLRT_SYSTEM_PYTHON3) + " " + (dir / "check.py").string() + " " +
                          (dir / "arrays.txt").string() + " 2>&1";
  std::string text;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    if (pclose(p) != 0) text = "SKIP python3 failed: " + text;
  }
  std::filesystem::remove_all(dir);
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  if (words.empty()) words.push_back("SKIP no output from python3");
  if (words[0] == "SKIP") words.push_back(text);
  return words;
}

TEST(TorchMetricsSklearn, ThreeRanksWithUnevenShardsEqualScikitLearn) {
  const Data d = make_data(251, 4, 77);
  const Data bin = make_data(173, 2, 78, /*coarse=*/true);  // tied scores
  std::vector<double> bscore;
  for (int64_t i = 0; i < bin.n; ++i) bscore.push_back(bin.probs[static_cast<size_t>(i * 2 + 1)]);
  // class ids of 6 classes, 4 and 5 in neither targets nor predictions
  const std::vector<int64_t> ids_target{0, 1, 1, 1, 2, 3, 3, 0, 2, 2, 1};
  const std::vector<int64_t> ids_pred{0, 0, 1, 2, 2, 3, 1, 0, 3, 2, 1};

  std::ostringstream arrays;
  write_line(arrays, "c", std::vector<int64_t>{d.c});
  write_line(arrays, "probs", d.probs);
  write_line(arrays, "target", d.target);
  write_line(arrays, "bscore", bscore);
  write_line(arrays, "btarget", bin.target);
  write_line(arrays, "reg_pred", d.reg_pred);
  write_line(arrays, "reg_target", d.reg_target);
  write_line(arrays, "weight", d.weight);
  write_line(arrays, "ids_target", ids_target);
  write_line(arrays, "ids_pred", ids_pred);
  const std::vector<std::string> sk = run_sklearn(arrays.str());
  if (sk[0] == "SKIP") GTEST_SKIP() << "scikit-learn is not available (apt-get install python3-sklearn): " << sk.back();
  ASSERT_EQ(sk[0], "OK") << sk.back();
  ASSERT_EQ(sk.size(), 10u);
  std::vector<double> want;
  for (size_t i = 1; i < sk.size(); ++i) want.push_back(std::stod(sk[i]));

  std::mutex m;
  std::vector<std::vector<double>> got;
  run_ranks(3, [&](int r, const pl::ProcessGroup& pg) {
    pl::ProcessGroupSync sync(pg);
    pl::Accuracy acc(d.c);
    pl::F1Score macro(d.c), micro(d.c, pl::F1Score::Average::Micro), ids_macro(6),
        ids_micro(6, pl::F1Score::Average::Micro);
    pl::AUROC ovr(d.c), binary(2);
    pl::MeanSquaredError mse;
    pl::MeanMetric mean;
    const auto b = shard_bounds(d.n, 3);
    batches(b[static_cast<size_t>(r)], b[static_cast<size_t>(r) + 1], 16, [&](int64_t i, int64_t j) {
      acc.update(probs_rows(d, i, j), target_rows(d, i, j));
      for (pl::F1Score* f : {&macro, &micro}) f->update(probs_rows(d, i, j), target_rows(d, i, j));
      ovr.update(probs_rows(d, i, j), target_rows(d, i, j));
      mse.update(rows(d.reg_pred, i, j), rows(d.reg_target, i, j));
      mean.update(rows(d.reg_pred, i, j), rows(d.weight, i, j));
    });
    const auto bb = shard_bounds(bin.n, 3);
    batches(bb[static_cast<size_t>(r)], bb[static_cast<size_t>(r) + 1], 16,
            [&](int64_t i, int64_t j) { binary.update(rows(bscore, i, j), target_rows(bin, i, j)); });
    const auto ib = shard_bounds(static_cast<int64_t>(ids_target.size()), 3);
    const auto lo = ids_target.begin() + ib[static_cast<size_t>(r)],
               hi = ids_target.begin() + ib[static_cast<size_t>(r) + 1];
    const auto plo = ids_pred.begin() + ib[static_cast<size_t>(r)],
               phi = ids_pred.begin() + ib[static_cast<size_t>(r) + 1];
    const int64_t k = hi - lo;
    for (pl::F1Score* f : {&ids_macro, &ids_micro})
      f->update(pl::Tensor::from_vector(std::vector<int64_t>(plo, phi), {k}),
                pl::Tensor::from_vector(std::vector<int64_t>(lo, hi), {k}));
    std::vector<double> mine{acc.compute(sync),  macro.compute(sync),     micro.compute(sync),
                             ovr.compute(sync),  binary.compute(sync),    mse.compute(sync),
                             mean.compute(sync), ids_macro.compute(sync), ids_micro.compute(sync)};
    std::lock_guard<std::mutex> g(m);
    got.push_back(mine);
  });
  ASSERT_EQ(got.size(), 3u);
  const char* names[] = {"accuracy_score",
                         "f1_score macro",
                         "f1_score micro",
                         "roc_auc_score ovr",
                         "roc_auc_score binary",
                         "mean_squared_error",
                         "np.average weights",
                         "f1_score macro (absent classes)",
                         "f1_score micro (6 classes)"};
  for (const auto& g : got)
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-12) << names[i];
}

}  // namespace
