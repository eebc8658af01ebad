// <immintrin.h> for the files whose functions carry per-ISA target attributes
// (kernels_avx2.cpp, kernels_avx512.cpp, quant_avx2.cpp, quant_avx512.cpp), in place of
// <immintrin.h> itself: the pragmas only act if this is the first inclusion of that header.
// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialisation, which its
// -Wuninitialized reports after inlining; the warning points into the header, so silence it there.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
