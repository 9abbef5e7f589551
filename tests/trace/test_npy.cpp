// .npy writing and reading, checked against NumPy itself in both directions.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "trace/npy.h"
#include "trace_test_util.h"

using namespace journey;

namespace {
void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}
std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
}  // namespace

TEST_CASE("npy: f32 and i32 round trip keeps shape and every bit") {
  auto dir = test::fresh_dir("npy_round_trip");
  std::vector<float> values = test::random_values(2 * 3 * 5, 7);
  values[3] = -std::numeric_limits<float>::infinity();  // masked attention scores must survive
  values[4] = 1e-38f;                                    // denormal range
  const std::vector<int64_t> shape = {2, 3, 5};
  write_npy(dir / "a.npy", values, shape);
  NpyArray a = read_npy(dir / "a.npy");
  CHECK(a.dtype == NpyDType::F32);
  CHECK(a.shape == shape);
  REQUIRE(a.f32.size() == values.size());
  for (size_t i = 0; i < values.size(); ++i) CHECK(std::memcmp(&a.f32[i], &values[i], 4) == 0);

  const std::vector<int32_t> ids = {1, 403, 407, 261, -5};
  const std::vector<int64_t> ids_shape = {5};
  write_npy(dir / "ids.npy", ids, ids_shape);
  NpyArray b = read_npy(dir / "ids.npy");
  CHECK(b.dtype == NpyDType::I32);
  CHECK(b.shape == ids_shape);
  CHECK(b.i32 == ids);
}

TEST_CASE("npy: header is a multiple of 64 bytes and spells the shape like Python") {
  auto dir = test::fresh_dir("npy_header");
  const std::vector<float> one = {1.5f};
  write_npy(dir / "v.npy", one, std::vector<int64_t>{1});
  const std::string bytes = read_bytes(dir / "v.npy");
  const size_t header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
  CHECK((10 + header_len) % 64 == 0);
  CHECK(bytes.find("'shape': (1,)") != std::string::npos);
  CHECK(bytes.find("'descr': '<f4'") != std::string::npos);

  write_npy(dir / "s.npy", one, std::vector<int64_t>{});  // a scalar: shape ()
  CHECK(read_bytes(dir / "s.npy").find("'shape': ()") != std::string::npos);
  CHECK(read_npy(dir / "s.npy").f32 == one);
}

TEST_CASE("npy: bad files get errors that name the file and the problem") {
  auto dir = test::fresh_dir("npy_bad");
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  CHECK_THROWS_WITH_AS(write_npy(dir / "x.npy", values, std::vector<int64_t>{4, 2}),
                       doctest::Contains("6 values do not fill shape [4, 2]"), Error);

  write_text(dir / "magic.npy", "PK\x03\x04 this is a zip file");
  CHECK_THROWS_WITH_AS(read_npy(dir / "magic.npy"), doctest::Contains("not a .npy file"), Error);
  CHECK_THROWS_WITH_AS(read_npy(dir / "absent.npy"), doctest::Contains("absent.npy"), Error);

  write_npy(dir / "good.npy", values, std::vector<int64_t>{2, 3});
  std::string bytes = read_bytes(dir / "good.npy");
  write_text(dir / "truncated.npy", bytes.substr(0, bytes.size() - 4));
  CHECK_THROWS_WITH_AS(read_npy(dir / "truncated.npy"), doctest::Contains("needs 24 data bytes, found 20"), Error);

  std::string f8 = bytes;
  f8.replace(f8.find("<f4"), 3, "<f8");
  write_text(dir / "f8.npy", f8);
  CHECK_THROWS_WITH_AS(read_npy(dir / "f8.npy"), doctest::Contains("dtype '<f8' is not supported"), Error);

  std::string fortran = bytes;
  fortran.replace(fortran.find("False"), 5, "True ");
  write_text(dir / "fortran.npy", fortran);
  CHECK_THROWS_WITH_AS(read_npy(dir / "fortran.npy"), doctest::Contains("fortran_order is True"), Error);

  std::string big_endian = bytes;
  big_endian.replace(big_endian.find("<f4"), 3, ">f4");
  write_text(dir / "be.npy", big_endian);
  CHECK_THROWS_AS(read_npy(dir / "be.npy"), Error);
}

TEST_CASE("npy: files written by numpy.save read correctly") {
  if (!test::have_numpy()) {
    MESSAGE("SKIPPED: /usr/bin/python3 with numpy is not available, cannot test against numpy");
    return;
  }
  auto dir = test::fresh_dir("npy_from_numpy");
  // NumPy computes the values itself; we check them against the same formula here.
  std::ofstream(dir / "make.py") << "import numpy as np\n"
                                 << "d = '" << dir.string() << "'\n"
                                 << "a = (np.arange(2*3*4, dtype=np.float32).reshape(2, 3, 4) * 0.25 - 1.5)\n"
                                 << "a[0, 1, 2] = -np.inf\n"
                                 << "np.save(d + '/f.npy', a)\n"
                                 << "np.save(d + '/i.npy', np.array([7, -1, 100000], dtype=np.int32))\n"
                                 << "np.save(d + '/s.npy', np.float32(3.5))\n"
                                 << "np.save(d + '/f8.npy', a.astype(np.float64))\n";
  REQUIRE(test::run_python(dir / "make.py") == 0);
  NpyArray f = read_npy(dir / "f.npy");
  CHECK(f.shape == std::vector<int64_t>{2, 3, 4});
  for (int i = 0; i < 24; ++i) {
    if (i == 1 * 4 + 2) CHECK(std::isinf(f.f32[i]));
    else CHECK(f.f32[i] == doctest::Approx(i * 0.25 - 1.5));
  }
  NpyArray ints = read_npy(dir / "i.npy");
  CHECK(ints.i32 == std::vector<int32_t>{7, -1, 100000});
  NpyArray scalar = read_npy(dir / "s.npy");
  CHECK(scalar.shape.empty());
  CHECK(scalar.f32 == std::vector<float>{3.5f});
  CHECK_THROWS_WITH_AS(read_npy(dir / "f8.npy"), doctest::Contains("'<f8'"), Error);
}

TEST_CASE("npy: numpy.load reads what we write") {
  if (!test::have_numpy()) {
    MESSAGE("SKIPPED: /usr/bin/python3 with numpy is not available, cannot test against numpy");
    return;
  }
  auto dir = test::fresh_dir("npy_to_numpy");
  std::vector<float> values(3 * 7);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) / 8.0f - 1.0f;
  write_npy(dir / "f.npy", values, std::vector<int64_t>{3, 7});
  write_npy(dir / "i.npy", std::vector<int32_t>{5, 6, 7, 8}, std::vector<int64_t>{2, 2});
  write_npy(dir / "v.npy", std::vector<float>{2.0f}, std::vector<int64_t>{1});
  std::ofstream(dir / "check.py") << "import numpy as np, sys\n"
                                  << "d = '" << dir.string() << "'\n"
                                  << "f = np.load(d + '/f.npy')\n"
                                  << "assert f.dtype == np.float32 and f.shape == (3, 7), (f.dtype, f.shape)\n"
                                  << "assert np.array_equal(f, np.arange(21, dtype=np.float32).reshape(3, 7) / 8 - 1)\n"
                                  << "i = np.load(d + '/i.npy')\n"
                                  << "assert i.dtype == np.int32 and i.tolist() == [[5, 6], [7, 8]], i\n"
                                  << "v = np.load(d + '/v.npy')\n"
                                  << "assert v.shape == (1,) and v[0] == 2.0\n";
  CHECK(test::run_python(dir / "check.py") == 0);
}
