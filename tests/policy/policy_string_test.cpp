#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../error_text.hpp"
#include "common/error.hpp"
#include "policy/config.hpp"

namespace steermoe::policy {
namespace {

using ::testing::HasSubstr;

std::string error_of(const std::string& text) {
  return test_support::error_text([&] { parse_policy(text); });
}

TEST(PolicyString, ParsesEveryNamedPolicyWithDefaults) {
  PolicyConfig exact = parse_policy("exact:evict=lru");
  EXPECT_EQ(exact.kind, PolicyKind::kExact);
  EXPECT_EQ(exact.evict, Evict::kLru);
  EXPECT_EQ(exact.prefetch_budget, 0);
  EXPECT_EQ(exact.lambda, 0.0f);

  PolicyConfig exact_a = parse_policy("exact:evict=a,n=2,w=6");
  EXPECT_EQ(exact_a.evict, Evict::kA);
  EXPECT_EQ(exact_a.prefetch_budget, 2);
  EXPECT_EQ(exact_a.window, 6);

  PolicyConfig cp = parse_policy("cacheprior:lambda=0.2,evict=lru,j=2,range=running");
  EXPECT_EQ(cp.kind, PolicyKind::kCachePrior);
  EXPECT_FLOAT_EQ(cp.lambda, 0.2f);
  EXPECT_EQ(cp.protect_top_j, 2);
  EXPECT_EQ(cp.range, RangeMode::kRunning);
  EXPECT_EQ(cp.prefetch_budget, 0);

  PolicyConfig psr = parse_policy("psr:lambda=0.3");
  EXPECT_EQ(psr.kind, PolicyKind::kPsr);
  EXPECT_EQ(psr.prefetch_budget, 1);  // default n = 1
  EXPECT_EQ(psr.window, 0);           // model default (8, or 4 for DeepSeek)
  EXPECT_EQ(psr.evict, Evict::kA);

  PolicyConfig spec = parse_policy("spec:n=2,w=4");
  EXPECT_EQ(spec.kind, PolicyKind::kSpec);
  EXPECT_EQ(spec.prefetch_budget, 2);

  EXPECT_EQ(psr.gate, PrefetchGate::kWindow);
  EXPECT_EQ(parse_policy("psr:lambda=0.3,gate=bonus").gate, PrefetchGate::kBonus);
  EXPECT_EQ(parse_policy("cacheprior:lambda=0.3,n=1,gate=bonus").gate, PrefetchGate::kBonus);

  PolicyConfig phys = parse_policy("physical:psr:lambda=0.3,n=1");
  EXPECT_TRUE(phys.physical);
  EXPECT_EQ(phys.kind, PolicyKind::kPsr);
}

TEST(PolicyString, CanonicalFormRoundTrips) {
  for (const char* text :
       {"exact:evict=lru", "exact:evict=a,n=1,w=8", "psr:lambda=0.3,n=1,w=8,evict=a",
        "psr:lambda=0.25,n=8", "cacheprior:lambda=0.2,evict=lru,j=2,range=running", "spec:n=1,w=4",
        "physical:cacheprior:lambda=0.2", "psr:lambda=0.3,n=2,gate=bonus"}) {
    PolicyConfig a = parse_policy(text);
    PolicyConfig b = parse_policy(a.to_string());
    EXPECT_EQ(a.to_string(), b.to_string()) << text;
    EXPECT_EQ(a.lambda, b.lambda);
    EXPECT_EQ(a.prefetch_budget, b.prefetch_budget);
    EXPECT_EQ(a.window, b.window);
    EXPECT_EQ(a.evict, b.evict);
    EXPECT_EQ(a.physical, b.physical);
    EXPECT_EQ(a.gate, b.gate);
  }
}

TEST(PolicyString, RejectsBadInputWithClearMessages) {
  EXPECT_THAT(error_of("psr:lambda=0.3,foo=1"), HasSubstr("key 'foo'"));
  EXPECT_THAT(error_of("psr:lambda=0.3,foo=1"), HasSubstr("expected one of"));
  EXPECT_THAT(error_of("nope:lambda=1"), HasSubstr("policy name"));
  EXPECT_THAT(error_of("psr:n=1"), HasSubstr("key 'lambda'"));
  EXPECT_THAT(error_of("psr:lambda=-1"), HasSubstr("finite number >= 0"));
  EXPECT_THAT(error_of("psr:lambda=nan"), HasSubstr("finite number >= 0"));
  EXPECT_THAT(error_of("psr:lambda=0.3x"), HasSubstr("key 'lambda'"));
  EXPECT_THAT(error_of("psr:lambda=0.3,n=-1"), HasSubstr("key 'n'"));
  EXPECT_THAT(error_of("psr:lambda=0.3,w=0"), HasSubstr("key 'w'"));
  EXPECT_THAT(error_of("psr:lambda=0.3,evict=fifo"), HasSubstr("'a' or 'lru'"));
  EXPECT_THAT(error_of("psr:lambda=0.3,lambda=0.2"), HasSubstr("given twice"));
  EXPECT_THAT(error_of("psr:lambda"), HasSubstr("key=value"));
  EXPECT_THAT(error_of("exact:lambda=0.2"), HasSubstr("unknown for policy 'exact'"));
  EXPECT_THAT(error_of("physical:exact"), HasSubstr("physical"));
  EXPECT_THAT(error_of("cacheprior:lambda=0.2,range=sometimes"), HasSubstr("'fixed' or 'running'"));
  EXPECT_THAT(error_of("psr:lambda=0.3,gate=maybe"), HasSubstr("'window' or 'bonus'"));
  EXPECT_THAT(error_of("physical:psr:lambda=0.3,gate=bonus"), HasSubstr("physical mode"));
  EXPECT_THAT(error_of("exact:gate=bonus"), HasSubstr("unknown for policy 'exact'"));
}

TEST(PolicyString, ValidateChecksCacheAgainstModel) {
  RouterSpec spec{.experts = 64, .top_k = 8, .layers = 16};
  PolicyConfig psr = parse_policy("psr:lambda=0.3");
  EXPECT_NO_THROW(validate(psr, spec, 32));
  EXPECT_NO_THROW(validate(psr, spec, 8));
  EXPECT_NO_THROW(validate(psr, spec, 64));
  EXPECT_THROW(validate(psr, spec, 7), Error);
  EXPECT_THROW(validate(psr, spec, 65), Error);
  EXPECT_THROW(validate(parse_policy("psr:lambda=0.3,w=65"), spec, 32), Error);
  EXPECT_THROW(validate(parse_policy("cacheprior:lambda=0.3,j=9"), spec, 32), Error);
  try {
    validate(psr, spec, 4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("K <= C <= E"));
  }
}

}  // namespace
}  // namespace steermoe::policy
