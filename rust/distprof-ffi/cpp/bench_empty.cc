// The baseline of `distprof bench hooks`: the cheapest call a hook could possibly be.
namespace distprof {
namespace bench {

__attribute__((noinline)) void EmptyCall() { asm volatile(""); }

}  // namespace bench
}  // namespace distprof
