# Helpers shared by the tests of several folders (tests/support/gp_test.h);
# gp_add_test links it into every test.
add_library(gp_test_support INTERFACE)
target_include_directories(gp_test_support INTERFACE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(gp_test_support INTERFACE gp_common gp_dep_cmocka)
