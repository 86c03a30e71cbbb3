"""
Where the credentials file goes in cluster deploy mode, and the settings that get it deleted.

In cluster deploy mode the driver does not run on the Airflow worker, so the ``0600`` credentials
file is shipped with ``--files`` (see :mod:`~airflow_kafka_retry.spark.credentials`):

* **YARN**: ``spark-submit`` uploads it to the application's staging folder,
  ``<stagingDir>/.sparkStaging/<application id>/`` (``spark.yarn.stagingDir``, default: the user's home in
  the default file system; readable by the submitting user only: Spark creates the folder ``0700``), and
  YARN localizes it into the working folder of the driver's and the executors' containers (under the
  NodeManagers' ``usercache/<user>/appcache/<application id>``). The ApplicationMaster deletes the staging
  folder when the application ends unless ``spark.yarn.preserve.staging.files`` is ``true``; the
  NodeManagers delete the containers' folders when the application ends (after
  ``yarn.nodemanager.delete.debug-delay-sec``). This package sets
  ``spark.yarn.preserve.staging.files=false`` on the command line, where it overrides a
  cluster-wide ``spark-defaults.conf``, unless the run's own configuration says otherwise (then it
  warns). A submission that dies between the upload and the ApplicationMaster's start (the
  ``spark-submit`` process killed, the cluster down) may leave the staging folder behind.
* **Kubernetes**: ``spark-submit`` uploads it to
  ``<spark.kubernetes.file.upload.path>/spark-upload-<uuid>/kafka-config.json`` and the driver pod
  downloads it into its working folder. Spark (4.x) never deletes the uploaded copy (no setting
  does), and the driver pod's copy lives as long as the pod (Spark keeps completed driver pods).
  ``spark-submit`` logs each upload (``Uploading file: <source> to dest: <uri>...``); the operator's
  hook records those lines and, once the application has ended, :func:`delete_uploads` deletes
  the ``spark-upload-<uuid>`` folders of the files from the run's private work folder (the
  credentials and the py-files zip) through fsspec (``s3a://`` needs ``s3fs``). What it cannot
  delete -- a backend missing, or ``spark-submit`` told not to wait for the application
  (``spark.kubernetes.submission.waitAppCompletion=false`` without ``track_driver_via_k8s_api``),
  or a worker that died mid-run -- it names in a warning, where it can. Every such submission also warns about
  the driver pod's copy: delete finished driver pods, or better, mount the credentials as a Kubernetes secret
  (``spark.kubernetes.driver.secrets.<name>=<path>``) and ship no file.
* **Standalone**: Spark does not run Python applications in cluster deploy mode.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

PRESERVE_STAGING = "spark.yarn.preserve.staging.files"
UPLOAD_PATH = "spark.kubernetes.file.upload.path"


def cluster_mode_conf(
    master: str | None, deploy_mode: str | None, spark_conf: Mapping[str, Any]
) -> dict[str, str]:
    """
    Spark properties to add so the shipped credentials file does not outlive the run.

    Warn where none can.

    :param master: the Spark master.
    :param deploy_mode: ``cluster`` or ``client`` (``None``: client).
    :param spark_conf: the properties the run already has (``--conf``, properties files, spark-defaults).
    :return: the properties to add; empty in client mode.
    """
    if deploy_mode != "cluster":
        return {}
    master = master or ""
    if master.startswith("yarn"):
        if PRESERVE_STAGING not in spark_conf:
            return {PRESERVE_STAGING: "false"}
        if str(spark_conf[PRESERVE_STAGING]).strip().lower() == "true":
            log.warning(
                "%s=true: the Kafka credentials file stays in the application's YARN staging folder "
                "(.sparkStaging/<application id>) after the run; delete it, or leave the setting out",
                PRESERVE_STAGING,
            )
    elif master.startswith("k8s://"):
        log.warning(
            "Kubernetes cluster mode: Spark uploads the Kafka credentials file to %s/spark-upload-<uuid>/ "
            "and never deletes it (the operator deletes it once the application has ended); the driver pod "
            "keeps its copy until the pod is deleted. Delete finished driver pods, or mount the credentials "
            "as a Kubernetes secret instead",
            spark_conf.get(UPLOAD_PATH, f"<{UPLOAD_PATH}>"),
        )
    return {}


#: What ``spark-submit`` logs for each file it uploads in Kubernetes cluster mode (``KubernetesUtils``).
UPLOAD_LINE = re.compile(r"Uploading file: (?P<source>\S+) to dest: (?P<dest>\S+?)\.\.\.\s*$")


def delete_uploads(uploads: Mapping[str, str], workdir: str) -> list[str]:
    """
    Delete the uploaded copies of files from ``workdir`` (``source path -> destination URI``).

    Each upload has a ``spark-upload-<uuid>`` folder of its own, which is deleted whole; a
    destination outside such a folder is deleted alone. Failures are logged with the URI (never
    raised: the run itself is over). Returns the URIs deleted.
    """
    import fsspec

    deleted: list[str] = []
    folder = os.path.abspath(workdir) + os.sep
    for source, dest in uploads.items():
        if not os.path.abspath(source).startswith(folder):
            continue
        parent, _, _ = dest.rpartition("/")
        target = parent if parent.rpartition("/")[2].startswith("spark-upload-") else dest
        try:
            fs, path = fsspec.core.url_to_fs(target)
            fs.rm(path, recursive=True)
        except Exception as exc:  # missing fsspec backend, credentials, network: say what is left
            log.warning(
                "could not delete %s, the copy Spark uploaded of %s; delete it by hand: %s",
                target,
                os.path.basename(source),
                exc,
            )
            continue
        deleted.append(target)
    return deleted
