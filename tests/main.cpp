// The one doctest main shared by every test executable (target tutti_test_main).
// Test files must not define main() or DOCTEST_CONFIG_IMPLEMENT*.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
