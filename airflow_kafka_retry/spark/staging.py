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
* **Kubernetes**: ``spark-submit`` uploads local files to
  ``<spark.kubernetes.file.upload.path>/spark-upload-<uuid>/`` and the driver pod downloads them into
  its working folder. Spark (4.x) never deletes the uploaded copy (no setting does), and the driver
  pod's copy lives as long as the pod (Spark keeps completed driver pods). So the operator uploads the
  run's own files (the credentials and the py-files zip, from its private work folder) itself, with
  :func:`upload_own_files`, to a folder of its own, ``<upload path>/airflow-kafka-retry-<uuid>/``,
  gives ``spark-submit`` their URIs (Spark uploads no copy of them), and once the application has
  ended deletes that folder and nothing else (:func:`delete_own_folder`, through fsspec: ``s3a://``
  needs ``s3fs``). What is deleted is computed from the operator's own staging, never read from
  ``spark-submit``'s output: that stream carries, in client mode, the driver's and the handler's own
  output, and a printed ``Uploading file: ... to dest: <uri>`` line used to get ``<uri>`` deleted.
  Where the operator cannot upload (no fsspec backend for the upload path, no credentials), Spark
  uploads the local files as before and a warning names where their copies stay. When ``spark-submit``
  is told not to wait for the application (``spark.kubernetes.submission.waitAppCompletion=false``
  without ``track_driver_via_k8s_api``), or the worker dies mid-run, the folder stays, named in a
  warning where possible. Every such submission also warns about the driver pod's copy: delete
  finished driver pods, or better, mount the credentials as a Kubernetes secret
  (``spark.kubernetes.driver.secrets.<name>=<path>``) and ship no file.
* **Standalone**: Spark does not run Python applications in cluster deploy mode.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping, Sequence
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
            "Kubernetes cluster mode: the Kafka credentials file is uploaded to %s (the operator uploads "
            "it to a folder of its own and deletes that once the application has ended); the driver pod "
            "keeps its copy until the pod is deleted. Delete finished driver pods, or mount the credentials "
            "as a Kubernetes secret instead",
            spark_conf.get(UPLOAD_PATH, f"<{UPLOAD_PATH}>"),
        )
    return {}


#: The name of the folder the operator uploads a run's own files to, under the upload path, ends in a uuid.
OWN_FOLDER_PREFIX = "airflow-kafka-retry-"


def kubernetes_upload_path(master: str | None, deploy_mode: str | None, spark_conf: Mapping[str, Any]) -> str:
    """The configured ``spark.kubernetes.file.upload.path`` in Kubernetes cluster mode, else ``""``."""
    if deploy_mode != "cluster" or not (master or "").startswith("k8s://"):
        return ""
    return str(spark_conf.get(UPLOAD_PATH) or "").strip().rstrip("/")


def upload_own_files(upload_path: str, paths: Sequence[str]) -> tuple[str, dict[str, str]] | None:
    """
    Upload ``paths`` (files of the run's own work folder) to a new folder under ``upload_path``.

    Where the file system has modes (a local or mounted path), the folder is made ``0700`` and each copy
    ``0600`` (the credentials among them); an object store's copies are as private as its bucket's policy.

    :return: the folder's URI (``<upload_path>/airflow-kafka-retry-<uuid>``) and each path's URI in
        it; ``None`` (with a warning, the folder deleted with whatever was uploaded) when the upload failed.
    """
    import fsspec

    folder = f"{upload_path.rstrip('/')}/{OWN_FOLDER_PREFIX}{uuid.uuid4()}"
    remote: dict[str, str] = {}
    made = False
    try:
        fs, root = fsspec.core.url_to_fs(folder)
        fs.makedirs(root, exist_ok=True)
        made = True
        _private(fs, root, 0o700)
        for path in paths:
            name = os.path.basename(path)
            fs.put_file(path, f"{root}/{name}")
            _private(fs, f"{root}/{name}", 0o600)
            remote[path] = f"{folder}/{name}"
    except Exception as exc:  # missing fsspec backend, credentials, network
        log.warning(
            "could not upload the run's files to %s (%s): spark-submit uploads them to "
            "%s/spark-upload-<uuid>/ instead, and those copies (the Kafka credentials among them) stay "
            "there: delete them by hand once the application has ended",
            upload_path,
            exc,
            upload_path,
        )
        if made:
            delete_own_folder(folder)
        return None
    return folder, remote


def _private(fs: Any, path: str, mode: int) -> None:
    """``chmod`` where the file system has modes (fsspec's local one); an object store has none."""
    chmod = getattr(fs, "chmod", None)
    if chmod is not None:
        chmod(path, mode)


def delete_own_folder(folder: str) -> bool:
    """
    Delete ``folder``, a folder :func:`upload_own_files` made; a failure is logged with its URI, never raised.

    Only a folder named as :func:`upload_own_files` names them is deleted.
    """
    import fsspec

    if not folder.rpartition("/")[2].startswith(OWN_FOLDER_PREFIX):
        raise ValueError(f"not an upload folder of this operator: {folder}")
    try:
        fs, path = fsspec.core.url_to_fs(folder)
        fs.rm(path, recursive=True)
    except Exception as exc:  # missing fsspec backend, credentials, network: say what is left
        log.warning("could not delete %s, the run's uploaded files; delete it by hand: %s", folder, exc)
        return False
    return True


def leave_own_folder(folder: str, reason: str) -> None:
    """Say why ``folder``, a folder :func:`upload_own_files` made, stays."""
    log.warning("%s: the run's uploaded files in %s stay; delete them once it has ended", reason, folder)
