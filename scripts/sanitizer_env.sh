# Sourced by the sanitizer scripts: how the sanitizers report. Every report ends the
# program with an error, so the test or fuzz run that made it fails.
# allocator_may_return_null: Tandem handles an allocation the host refuses (a tensor of
# 512 GiB is an OutOfMemory naming its layer), as it does without ASan.
# ignore_noninstrumented_modules: OpenMP's runtime (libomp) is not instrumented; it
# annotates its own synchronisation for TSan and asks for this.
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:detect_stack_use_after_return=1:strict_string_checks=1"
# Open MPI's own allocations that live until exit are suppressed (lsan_suppressions.txt).
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lsan_suppressions.txt:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1"
