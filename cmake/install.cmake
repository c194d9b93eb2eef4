# Install layout and the Debian package (CPack), included at the end of the
# top-level CMakeLists.txt so that every target exists by then.
#
#   <prefix>/lib/r2sock/libr2sock.so   the preload module (not on the loader's
#                                      path: it is only ever LD_PRELOADed)
#   <prefix>/lib/r2sock/r2sock-check   what `r2sock-run --check` runs
#   <prefix>/lib/r2sock/r2sock-rules   ... to check and explain the rules file
#   <prefix>/lib/r2sock/r2sock-preload.sh  what goes in LD_PRELOAD for a path
#                                      with a blank (sourced by both scripts)
#   <prefix>/bin/r2sock-run            the launcher (finds ../lib/r2sock/)
#   <prefix>/bin/r2sock-stat           the live statistics viewer
#   <prefix>/share/man/man{1,7}/       r2sock(7), r2sock-run(1), r2sock-stat(1)
#
# The library directory is lib/r2sock literally, not GNUInstallDirs' libdir
# (lib/x86_64-linux-gnu under /usr on Debian): the launcher finds it relative
# to itself, so the layout must not depend on the prefix.
include(GNUInstallDirs)
set(R2SOCK_INSTALL_PKGLIBDIR lib/r2sock)

install(TARGETS r2sock LIBRARY DESTINATION ${R2SOCK_INSTALL_PKGLIBDIR})
install(PROGRAMS scripts/r2sock-check DESTINATION ${R2SOCK_INSTALL_PKGLIBDIR})
install(FILES scripts/r2sock-preload.sh DESTINATION ${R2SOCK_INSTALL_PKGLIBDIR})
install(TARGETS r2sock-rules RUNTIME DESTINATION ${R2SOCK_INSTALL_PKGLIBDIR})
install(PROGRAMS scripts/r2sock-run DESTINATION ${CMAKE_INSTALL_BINDIR})

# r2sock-stat may be defined anywhere in the tree, and after this file is
# read; the rule is added once the whole directory has been processed.
# Its manual page goes with it.
function(r2s_install_stat_tool)
  if(TARGET r2sock-stat)
    install(TARGETS r2sock-stat RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
    install(FILES ${PROJECT_BINARY_DIR}/man/r2sock-stat.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  endif()
endfunction()
if(CMAKE_VERSION VERSION_LESS 3.19)  # no DEFER: r2sock-stat must be defined before this file
  r2s_install_stat_tool()
else()
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL r2s_install_stat_tool)
endif()

# Man pages, compressed as Debian installs them.
set(R2SOCK_MAN_PAGES r2sock.7 r2sock-run.1 r2sock-stat.1)
set(r2s_man_gz "")
foreach(page IN LISTS R2SOCK_MAN_PAGES)
  string(REGEX REPLACE ".*\\.([0-9])$" "\\1" section ${page})
  set(src ${PROJECT_SOURCE_DIR}/docs/man/${page})
  set(gz ${PROJECT_BINARY_DIR}/man/${page}.gz)
  add_custom_command(OUTPUT ${gz}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
    COMMAND ${CMAKE_COMMAND} -E copy ${src} ${PROJECT_BINARY_DIR}/man/${page}
    COMMAND gzip -9nf ${PROJECT_BINARY_DIR}/man/${page}
    DEPENDS ${src} VERBATIM)
  list(APPEND r2s_man_gz ${gz})
  if(NOT page STREQUAL "r2sock-stat.1")
    install(FILES ${gz} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
  endif()
endforeach()
add_custom_target(r2sock_man ALL DEPENDS ${r2s_man_gz})

# cpack -G DEB in the build directory: r2sock_<version>_<arch>.deb for /usr.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME r2sock)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "r2sock developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "run unmodified TCP programs over shared memory or RDMA")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "r2sock developers")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The first line is CPACK_PACKAGE_DESCRIPTION_SUMMARY; CPack indents the rest.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "r2sock is a library preloaded into both ends of a TCP connection
(r2sock-run program). The program keeps its real TCP socket; where both
ends run r2sock, the payload moves through a shared-memory ring (same host)
or an RDMA queue pair instead of the kernel TCP stack, and everywhere else
the connection stays plain TCP.

This package holds the library, the launcher r2sock-run (with --check),
the live statistics viewer r2sock-stat, and the manual pages.")
# The shim links only libc; libibverbs is loaded at run time, for RDMA only.
find_program(R2SOCK_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(R2SOCK_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6 (>= 2.34)")
endif()
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libibverbs1")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "ibverbs-providers, ibverbs-utils, rdma-core")
set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build[^/]*/" "/out/")
include(CPack)
