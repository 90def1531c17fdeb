#!/bin/bash
# Entrypoint of the gazette-spark image (images/spark/Dockerfile).
#
# Spark on Kubernetes starts its executor pods with the argument "executor"
# (and, in cluster mode, its driver pod with "driver"), passing everything else
# in SPARK_* environment variables; this turns them into the JVM command.
# Anything else runs as given: `spark-submit ...` in a Job pod, `python`, `bash`.
#
# Adapted from Apache Spark's entrypoint.sh (apache/spark-docker,
# entrypoint.sh.template; Apache License 2.0), whose executor command this
# follows: Spark's Kubernetes backend expects exactly these arguments.
set -eo pipefail

# A container run under an arbitrary UID (OpenShift) has no passwd entry, and
# Hadoop's login fails without a user name: give it one through nss_wrapper.
if ! getent passwd "$(id -u)" >/dev/null 2>&1; then
  for wrapper in {/usr,}/lib{/*,}/libnss_wrapper.so; do
    if [ -s "$wrapper" ]; then
      NSS_WRAPPER_PASSWD="$(mktemp)"
      NSS_WRAPPER_GROUP="$(mktemp)"
      export LD_PRELOAD="$wrapper" NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP
      printf 'spark:x:%s:%s:%s:%s:/bin/false\n' "$(id -u)" "$(id -g)" \
        "${SPARK_USER_NAME:-anonymous uid}" "$SPARK_HOME" >"$NSS_WRAPPER_PASSWD"
      printf 'spark:x:%s:\n' "$(id -g)" >"$NSS_WRAPPER_GROUP"
      break
    fi
  done
fi

if [ -z "${JAVA_HOME:-}" ]; then
  JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
  export JAVA_HOME
fi

SPARK_CLASSPATH="${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}${SPARK_HOME}/jars/*"
if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then
  SPARK_CLASSPATH="$SPARK_CLASSPATH:$SPARK_EXTRA_CLASSPATH"
fi
if [ -n "${HADOOP_CONF_DIR:-}" ]; then
  SPARK_CLASSPATH="$HADOOP_CONF_DIR:$SPARK_CLASSPATH"
fi
if [ -n "${SPARK_CONF_DIR:-}" ]; then
  SPARK_CLASSPATH="$SPARK_CONF_DIR:$SPARK_CLASSPATH"
else
  SPARK_CLASSPATH="$SPARK_HOME/conf:$SPARK_CLASSPATH"
fi
# SPARK-43540: files Spark ships to the working directory are on the executor's class path.
SPARK_CLASSPATH="$SPARK_CLASSPATH:$PWD"

# The executor's JVM options, SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in order.
SPARK_EXECUTOR_JAVA_OPTS=()
while IFS= read -r name; do
  SPARK_EXECUTOR_JAVA_OPTS+=("${!name}")
done < <(compgen -e | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n)

case "${1:-}" in
  driver)
    shift 1
    exec /usr/bin/tini -s -- "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    shift 1
    exec /usr/bin/tini -s -- "$JAVA_HOME/bin/java" \
      "${SPARK_EXECUTOR_JAVA_OPTS[@]}" \
      -Xms"$SPARK_EXECUTOR_MEMORY" \
      -Xmx"$SPARK_EXECUTOR_MEMORY" \
      -cp "$SPARK_CLASSPATH${SPARK_DIST_CLASSPATH:+:$SPARK_DIST_CLASSPATH}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" \
      --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  *)
    exec /usr/bin/tini -s -- "$@"
    ;;
esac
