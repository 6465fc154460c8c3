/* The least a TCP relay can do, as a floor for the proxy's benchmarks (issue 36).
 *
 *     splice_relay LISTEN_PORT UPSTREAM_PORT
 *
 * Listens on 127.0.0.1:LISTEN_PORT; each connection gets one to 127.0.0.1:UPSTREAM_PORT and two
 * threads, one per direction, that move bytes socket -> pipe -> socket with splice(2): no copy
 * into user space, one blocking call per hop, no event loop. It reads nothing of what it carries,
 * so a Kafka client reaches it only through a broker listener advertised at its port
 * (tests/kafka_cluster.py, ``relayed_port``). Built by the benchmarks with the machine's C compiler.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

enum { PIPE_BYTES = 1 << 20 };  /* the proxy's own relay pipe size (proxy/framing.py) */

struct direction {
    int from;
    int to;
};

static struct sockaddr_in loopback(int port) {
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return address;
}

static void *carry(void *arg) {
    struct direction *d = arg;
    int pipe_ends[2];
    if (pipe(pipe_ends) == 0) {
        fcntl(pipe_ends[1], F_SETPIPE_SZ, PIPE_BYTES);
        ssize_t got;
        while ((got = splice(d->from, NULL, pipe_ends[1], NULL, PIPE_BYTES, SPLICE_F_MOVE)) > 0) {
            while (got > 0) {
                ssize_t sent = splice(pipe_ends[0], NULL, d->to, NULL, (size_t)got, SPLICE_F_MOVE);
                if (sent <= 0)
                    goto done;
                got -= sent;
            }
        }
    done:
        close(pipe_ends[0]);
        close(pipe_ends[1]);
    }
    /* One side ended: end both, which also ends the other direction's thread. */
    shutdown(d->from, SHUT_RDWR);
    shutdown(d->to, SHUT_RDWR);
    free(d);
    return NULL;
}

static int start(int from, int to) {
    struct direction *d = malloc(sizeof *d);
    pthread_t thread;
    if (d == NULL)
        return -1;
    d->from = from;
    d->to = to;
    if (pthread_create(&thread, NULL, carry, d) != 0) {
        free(d);
        return -1;
    }
    return pthread_detach(thread);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s LISTEN_PORT UPSTREAM_PORT\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);  /* a client gone mid-answer is an error return, not the relay's end */
    struct sockaddr_in listen_at = loopback(atoi(argv[1])), upstream = loopback(atoi(argv[2]));
    int listener = socket(AF_INET, SOCK_STREAM, 0), on = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (bind(listener, (struct sockaddr *)&listen_at, sizeof listen_at) != 0 || listen(listener, 128) != 0) {
        perror("splice_relay: listen");
        return 1;
    }
    for (;;) {
        int client = accept(listener, NULL, NULL);
        if (client < 0)
            continue;
        int broker = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(broker, (struct sockaddr *)&upstream, sizeof upstream) != 0) {
            close(client);
            close(broker);
            continue;
        }
        setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
        setsockopt(broker, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
        /* The sockets stay open for the relay's life: a handful of benchmark connections. */
        if (start(client, broker) != 0 || start(broker, client) != 0)
            fprintf(stderr, "splice_relay: no thread for a connection\n");
    }
}
