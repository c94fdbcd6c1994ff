"""One exception class per Kafka error code we raise.

Handlers raise these with a message that carries context (topic-partition, offsets, sizes);
the dispatcher turns them into the error code of the response exactly once.
"""

from __future__ import annotations

from typing import ClassVar

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "error_name"]


def error_name(code: int) -> str:
    """Kafka's name for an error code, with the number: `TRANSACTIONAL_ID_NOT_FOUND (105)`.

    What the tools print wherever a broker answered an error, so nobody has to look it up.
    """
    try:
        return f"{ErrorCode(code).name.upper()} ({code})"
    except ValueError:
        return f"UNKNOWN_ERROR_CODE ({code})"


class KafkaError(Exception):
    """Base of every error that maps to a Kafka error code."""

    code: ClassVar[ErrorCode] = ErrorCode.unknown_server_error

    @property
    def retriable(self) -> bool:
        return bool(self.code.retriable)


class UnknownServerError(KafkaError):
    code = ErrorCode.unknown_server_error


class OffsetOutOfRange(KafkaError):
    code = ErrorCode.offset_out_of_range


class CorruptMessage(KafkaError):
    code = ErrorCode.corrupt_message


class UnknownTopicOrPartition(KafkaError):
    code = ErrorCode.unknown_topic_or_partition


class InvalidFetchSize(KafkaError):
    code = ErrorCode.invalid_fetch_size


class NotLeaderOrFollower(KafkaError):
    code = ErrorCode.not_leader_or_follower


class MessageTooLarge(KafkaError):
    code = ErrorCode.message_too_large


class InvalidTopic(KafkaError):
    code = ErrorCode.invalid_topic_exception


class RecordListTooLarge(KafkaError):
    code = ErrorCode.record_list_too_large


class InvalidRequiredAcks(KafkaError):
    code = ErrorCode.invalid_required_acks


class InvalidTimestamp(KafkaError):
    code = ErrorCode.invalid_timestamp


class UnsupportedVersion(KafkaError):
    code = ErrorCode.unsupported_version


class TopicAlreadyExists(KafkaError):
    code = ErrorCode.topic_already_exists


class InvalidPartitions(KafkaError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactor(KafkaError):
    code = ErrorCode.invalid_replication_factor


class InvalidConfig(KafkaError):
    code = ErrorCode.invalid_config


class InvalidRequest(KafkaError):
    code = ErrorCode.invalid_request


class UnsupportedForMessageFormat(KafkaError):
    code = ErrorCode.unsupported_for_message_format


class UnsupportedCompressionType(KafkaError):
    code = ErrorCode.unsupported_compression_type


class InvalidRecord(KafkaError):
    code = ErrorCode.invalid_record


class PolicyViolation(KafkaError):
    code = ErrorCode.policy_violation


class NotEnoughReplicas(KafkaError):
    code = ErrorCode.not_enough_replicas


class KafkaStorageError(KafkaError):
    code = ErrorCode.kafka_storage_error


class OffsetNotAvailable(KafkaError):
    code = ErrorCode.offset_not_available


class FencedLeaderEpoch(KafkaError):
    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpoch(KafkaError):
    code = ErrorCode.unknown_leader_epoch


class OutOfOrderSequenceNumber(KafkaError):
    code = ErrorCode.out_of_order_sequence_number


class DuplicateSequenceNumber(KafkaError):
    code = ErrorCode.duplicate_sequence_number


class InvalidProducerEpoch(KafkaError):
    code = ErrorCode.invalid_producer_epoch


class UnknownProducerId(KafkaError):
    code = ErrorCode.unknown_producer_id


class ProducerFenced(KafkaError):
    code = ErrorCode.producer_fenced


class InvalidProducerIdMapping(KafkaError):
    code = ErrorCode.invalid_producer_id_mapping


class TransactionalIdAuthorizationFailed(KafkaError):
    code = ErrorCode.transactional_id_authorization_failed


class ClusterAuthorizationFailed(KafkaError):
    code = ErrorCode.cluster_authorization_failed


class InvalidTxnState(KafkaError):
    code = ErrorCode.invalid_txn_state


class TransactionCoordinatorFenced(KafkaError):
    code = ErrorCode.transaction_coordinator_fenced


class PreferredLeaderNotAvailable(KafkaError):
    code = ErrorCode.preferred_leader_not_available


class EligibleLeadersNotAvailable(KafkaError):
    code = ErrorCode.eligible_leaders_not_available


class ElectionNotNeeded(KafkaError):
    code = ErrorCode.election_not_needed


class CoordinatorLoadInProgress(KafkaError):
    code = ErrorCode.coordinator_load_in_progress


class CoordinatorNotAvailable(KafkaError):
    code = ErrorCode.coordinator_not_available


class NotCoordinator(KafkaError):
    code = ErrorCode.not_coordinator


class LeaderNotAvailable(KafkaError):
    code = ErrorCode.leader_not_available


class RequestTimedOut(KafkaError):
    code = ErrorCode.request_timed_out


class InvalidReplicaAssignment(KafkaError):
    code = ErrorCode.invalid_replica_assignment


class NotController(KafkaError):
    code = ErrorCode.not_controller


class NoReassignmentInProgress(KafkaError):
    code = ErrorCode.no_reassignment_in_progress
