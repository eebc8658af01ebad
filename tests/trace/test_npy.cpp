// .npy headers and arrays: round trips, numpy's header variants, and every rejection path.
#include <cstring>
#include <limits>

#include "common/error.hpp"
#include "test_util.hpp"
#include "trace/npy.hpp"

namespace steermoe::trace {
namespace {

using testing::ScratchDir;

// A .npy file with a hand-written header dict (padded like numpy does) and raw data bytes.
std::vector<uint8_t> npy_bytes(const std::string& dict, size_t data_bytes, int major = 1) {
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  const size_t prefix = major == 1 ? 10 : 12;
  std::string padded = dict;
  while ((prefix + padded.size() + 1) % 64 != 0) padded.push_back(' ');
  padded.push_back('\n');
  const uint32_t len = static_cast<uint32_t>(padded.size());
  out.push_back(static_cast<uint8_t>(len));
  out.push_back(static_cast<uint8_t>(len >> 8));
  if (major != 1) {
    out.push_back(static_cast<uint8_t>(len >> 16));
    out.push_back(static_cast<uint8_t>(len >> 24));
  }
  out.insert(out.end(), padded.begin(), padded.end());
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i));
  return out;
}

TEST(Npy, WholeArrayRoundTripsEveryDtype) {
  ScratchDir dir;
  const std::vector<float> f = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  const std::vector<int32_t> i4 = {0, -1, 2147483647, 5};
  const std::vector<int64_t> i8 = {0, -1, std::numeric_limits<int64_t>::max()};
  const uint64_t f_shape[] = {2, 3}, i4_shape[] = {4}, i8_shape[] = {3, 1};
  write_npy<float>(dir / "f.npy", f, f_shape);
  write_npy<int32_t>(dir / "i4.npy", i4, i4_shape);
  write_npy<int64_t>(dir / "i8.npy", i8, i8_shape);

  const NpyArray fa = NpyArray::open(dir / "f.npy", {DType::kF32});
  EXPECT_EQ(fa.shape(), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(std::vector<float>(fa.values<float>().begin(), fa.values<float>().end()), f);
  EXPECT_EQ(fa.header().data_offset % 64, 0u);
  const NpyArray ia = NpyArray::open(dir / "i4.npy", {DType::kI32});
  EXPECT_EQ(std::vector<int32_t>(ia.values<int32_t>().begin(), ia.values<int32_t>().end()), i4);
  const NpyArray la = NpyArray::open(dir / "i8.npy", {DType::kI64, DType::kI32});
  EXPECT_EQ(la.dtype(), DType::kI64);
  EXPECT_EQ(std::vector<int64_t>(la.values<int64_t>().begin(), la.values<int64_t>().end()), i8);
}

TEST(Npy, HeaderIsWhatNumpyWrites) {
  const uint64_t shape[] = {3};
  const std::vector<uint8_t> header = encode_npy_header(DType::kI32, shape);
  const std::string text(header.begin() + 10, header.end());
  EXPECT_EQ(text.rfind("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", 0), 0u);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(header.size() % 64, 0u);
}

TEST(Npy, AcceptsVersions2And3AndNumpyDictVariants) {
  for (int major : {2, 3}) {
    const NpyArray a = NpyArray::from_bytes(
        npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 16, major),
        "v.npy", {DType::kF32});
    EXPECT_EQ(a.header().major_version, major);
    EXPECT_EQ(a.shape(), (std::vector<uint64_t>{2, 2}));
  }
  // Key order, double quotes, no trailing comma, scalar shape.
  const NpyArray scalar = NpyArray::from_bytes(
      npy_bytes("{\"shape\": (), \"fortran_order\": False, \"descr\": \"<i8\"}", 8), "s.npy",
      {DType::kI64});
  EXPECT_EQ(scalar.size(), 1u);
  const NpyArray empty = NpyArray::from_bytes(
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", 0), "e.npy",
      {DType::kF32});
  EXPECT_EQ(empty.size(), 0u);
}

TEST(Npy, MisalignedDataIsCopiedNotMisread) {
  // A header length that leaves the data at an odd offset (legal, numpy never writes it).
  std::vector<uint8_t> bytes = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}\n";
  bytes.push_back(static_cast<uint8_t>(dict.size()));
  bytes.push_back(0);
  bytes.insert(bytes.end(), dict.begin(), dict.end());
  const float values[2] = {1.25f, -3.0f};
  const auto* raw = reinterpret_cast<const uint8_t*>(values);
  bytes.insert(bytes.end(), raw, raw + sizeof(values));
  ASSERT_NE((10 + dict.size()) % 4, 0u);
  const NpyArray a = NpyArray::from_bytes(bytes, "odd.npy", {DType::kF32});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.values<float>().data()) % alignof(float), 0u);
  EXPECT_EQ(a.values<float>()[0], 1.25f);
  EXPECT_EQ(a.values<float>()[1], -3.0f);
}

TEST(Npy, RejectsFortranOrder) {
  EXPECT_ERROR_MENTIONS(
      NpyArray::from_bytes(
          npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16),
          "fortran.npy", {DType::kF32}),
      "fortran.npy", "fortran_order", "C order");
}

TEST(Npy, RejectsBigEndianAndWrongDtype) {
  EXPECT_ERROR_MENTIONS(
      NpyArray::from_bytes(
          npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8), "big.npy",
          {DType::kF32}),
      "big.npy", "descr", "little-endian", "big-endian");
  EXPECT_ERROR_MENTIONS(
      NpyArray::from_bytes(
          npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16), "f8.npy",
          {DType::kF32}),
      "f8.npy", "descr", "'<f4'", "'<f8'");
  // A valid dtype that is not the one the field needs.
  EXPECT_ERROR_MENTIONS(
      NpyArray::from_bytes(
          npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 8), "scores.npy",
          {DType::kF32}),
      "scores.npy", "descr", "expected dtype '<f4'", "found '<i4'");
}

TEST(Npy, RejectsDataSizeThatDisagreesWithShape) {
  EXPECT_ERROR_MENTIONS(
      NpyArray::from_bytes(
          npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20), "short.npy",
          {DType::kF32}),
      "short.npy", "data", "truncated", "24 bytes", "found 20");
  EXPECT_ERROR_MENTIONS(
      NpyArray::from_bytes(
          npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 12), "long.npy",
          {DType::kF32}),
      "long.npy", "data", "trailing bytes");
  // A shape whose byte size overflows 64 bits must not wrap around to a small number.
  EXPECT_ERROR_MENTIONS(
      NpyArray::from_bytes(
          npy_bytes(
              "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }",
              0),
          "huge.npy", {DType::kF32}),
      "huge.npy", "shape", "64 bits");
}

TEST(Npy, RejectsBadHeaderDicts) {
  const std::pair<const char*, const char*> cases[] = {
      {"{'descr': '<f4', 'shape': (2,), }", "fortran_order"},
      {"{'descr': '<f4', 'fortran_order': False, }", "shape"},
      {"{'fortran_order': False, 'shape': (2,), }", "descr"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1, }", "only the keys"},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", "True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", "tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", "tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,) junk", "',' or '}'"},
      {"['descr', '<f4']", "dict"},
      {"{'descr: '<f4', 'fortran_order': False, 'shape': (2,), }", "header dict"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", "twice"},
  };
  for (const auto& entry : cases) {
    // Named copies: clang 14 cannot capture structured bindings in the lambda below.
    const char* dict = entry.first;
    const char* expected = entry.second;
    SCOPED_TRACE(dict);
    EXPECT_ERROR_MENTIONS(NpyArray::from_bytes(npy_bytes(dict, 8), "bad.npy", {DType::kF32}),
                          "bad.npy", expected);
  }
}

TEST(Npy, RejectsBadMagicVersionAndHeaderLength) {
  EXPECT_ERROR_MENTIONS(NpyArray::from_bytes({'P', 'K', 3, 4}, "zip.npy", {DType::kF32}), "zip.npy",
                        "magic");
  std::vector<uint8_t> v4 =
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8);
  v4[6] = 4;
  EXPECT_ERROR_MENTIONS(NpyArray::from_bytes(v4, "v4.npy", {DType::kF32}), "v4.npy", "version",
                        "1.0, 2.0 or 3.0");
  std::vector<uint8_t> long_header =
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8);
  long_header[9] = 0x7f;
  EXPECT_ERROR_MENTIONS(NpyArray::from_bytes(long_header, "len.npy", {DType::kF32}), "len.npy",
                        "header length");
}

TEST(Npy, EveryTruncationIsRejectedCleanly) {
  const std::vector<uint8_t> good =
      npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", 24);
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> prefix(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(NpyArray::from_bytes(prefix, "cut.npy", {DType::kI64}), Error)
        << "prefix of " << n << " bytes";
  }
  EXPECT_NO_THROW(NpyArray::from_bytes(good, "whole.npy", {DType::kI64}));
}

TEST(Npy, ExpectShapeNamesBothShapes) {
  const uint64_t shape[] = {2, 3};
  const std::vector<float> values(6, 1.0f);
  ScratchDir dir;
  write_npy<float>(dir / "a.npy", values, shape);
  const NpyArray a = NpyArray::open(dir / "a.npy", {DType::kF32});
  const uint64_t wanted[] = {3, 2};
  EXPECT_ERROR_MENTIONS(a.expect_shape(wanted), "a.npy", "shape", "expected [3, 2]",
                        "found [2, 3]");
  EXPECT_NO_THROW(a.expect_shape(shape));
}

TEST(Npy, StreamWriterPutsTheFinalShapeInTheHeader) {
  ScratchDir dir;
  {
    NpyStreamWriter writer(dir / "s.npy", DType::kF32, {2, 3});
    std::vector<float> rows(12);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
    writer.append<float>(std::span<const float>(rows).first(6));
    writer.append<float>(std::span<const float>(rows).subspan(6));
    EXPECT_EQ(writer.rows(), 2u);
    writer.close();
  }
  const NpyArray a = NpyArray::open(dir / "s.npy", {DType::kF32});
  EXPECT_EQ(a.shape(), (std::vector<uint64_t>{2, 2, 3}));
  EXPECT_EQ(a.values<float>()[11], 11.0f);
  // An empty stream is a valid [0, ...] array.
  { NpyStreamWriter empty(dir / "e.npy", DType::kI32, {}); }
  EXPECT_EQ(NpyArray::open(dir / "e.npy", {DType::kI32}).shape(), (std::vector<uint64_t>{0}));
}

TEST(Npy, MissingFileIsNamed) {
  EXPECT_ERROR_MENTIONS(NpyArray::open("/nonexistent/steermoe/x.npy", {DType::kF32}),
                        "/nonexistent/steermoe/x.npy", "open");
}

}  // namespace
}  // namespace steermoe::trace
