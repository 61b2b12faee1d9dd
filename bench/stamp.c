/* The child-start stamp used in front of the node program for every supervisor alike.
 *
 *     stamp FILE PROGRAM [ARGS...]
 *
 * First thing, appends "<pid> <CLOCK_MONOTONIC ns>\n" to FILE, then execs PROGRAM
 * in the same process (so the pid a supervisor watches is the node's own).
 * CLOCK_MONOTONIC is the clock behind Python's time.monotonic_ns() on Linux, so
 * the benchmark compares this stamp with its own kill time directly.
 * A C program, not a script: a shell or Python wrapper would add its own start-up
 * (1-15 ms) to every measurement.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fputs("usage: stamp FILE PROGRAM [ARGS...]\n", stderr);
        return 2;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char line[64];
    int n = snprintf(line, sizeof line, "%ld %lld\n", (long)getpid(),
                     (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
        if (write(fd, line, (size_t)n) != n) { /* a lost stamp shows up as a timeout */ }
        close(fd);
    }
    execvp(argv[2], argv + 2);
    perror("stamp: exec");
    return 127;
}
