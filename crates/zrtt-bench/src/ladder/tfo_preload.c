/* LD_PRELOAD shim for `zrtt lab ladder`: gives programs without a TCP Fast
 * Open option (openssl s_client) Fast Open on their TCP sockets by setting
 * TCP_FASTOPEN_CONNECT (Linux 4.11+): connect() then returns at once and
 * the first write travels in the SYN when a cookie for the server is cached
 * (otherwise the kernel asks for one and the connection proceeds as usual). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#ifndef TCP_FASTOPEN_CONNECT
#define TCP_FASTOPEN_CONNECT 30
#endif

int socket(int domain, int type, int protocol) {
    static int (*real_socket)(int, int, int);
    if (!real_socket)
        real_socket = (int (*)(int, int, int))dlsym(RTLD_NEXT, "socket");
    int fd = real_socket(domain, type, protocol);
    if (fd >= 0 && (domain == AF_INET || domain == AF_INET6) &&
        (type & 0xf) == SOCK_STREAM) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_FASTOPEN_CONNECT, &one, sizeof one);
    }
    return fd;
}
