#!/bin/sh
# A wrapper around the node program, as a packager might write one: the node
# runs as its child (not exec'd), so killing the wrapper alone leaves the node
# behind in the wrapper's process group. Used by the stray-process tests.
"$@"
status=$?
echo "wrapper: the node exited with $status"
exit $status
