"""Hook Job of storage.trialServer: create the bucket on the in-cluster S3 server.

Runs in the broker image, whose boto3 is the S3 client the brokers use, so the bucket
is made the way it is then written. Retries while the server starts; an existing
bucket is fine (the hook runs again on every upgrade).

Environment: S3_ENDPOINT, BUCKET, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY.
"""

import os
import sys
import time

import boto3
import botocore.exceptions


def main() -> int:
    endpoint = os.environ["S3_ENDPOINT"]
    bucket = os.environ["BUCKET"]
    s3 = boto3.client("s3", endpoint_url=endpoint)
    for _ in range(60):
        try:
            s3.create_bucket(Bucket=bucket)
            print(f"create-bucket: created {bucket} at {endpoint}")
            return 0
        except botocore.exceptions.ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                print(f"create-bucket: {bucket} exists at {endpoint}")
                return 0
            print(f"create-bucket: {e}", file=sys.stderr)
        except botocore.exceptions.BotoCoreError as e:
            print(f"create-bucket: {endpoint} not reachable yet: {e}", file=sys.stderr)
        time.sleep(2)
    return 1


if __name__ == "__main__":
    sys.exit(main())
