package com.example.orders;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

import org.springframework.beans.factory.annotation.Value;
import org.springframework.kafka.retrytopic.RetryTopicHeaders;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.stereotype.Component;

/**
 * The service's own books: one JSON line per handling (processed or failed) and per dead letter, appended to
 * {@code orders.events-file}. Never the payload, only the order id (the record key) and coordinates.
 */
@Component
public class ServiceEvents {

	private final Path file;

	public ServiceEvents(@Value("${orders.events-file}") String file) {
		this.file = Path.of(file);
	}

	/** The attempt a record is on, read as Spring's DeadLetterPublishingRecovererFactory reads it. */
	public static int attempts(ConsumerRecord<?, ?> rec) {
		Header header = rec.headers().lastHeader(RetryTopicHeaders.DEFAULT_HEADER_ATTEMPTS);
		if (header == null) {
			return 1;
		}
		byte[] value = header.value();
		if (value.length == Byte.BYTES) {
			return Byte.toUnsignedInt(value[0]);
		}
		return value.length == Integer.BYTES ? ByteBuffer.wrap(value).getInt() : 1;
	}

	public void handled(String listener, ConsumerRecord<String, String> rec, int attempt, RuntimeException failure) {
		Map<String, Object> line = coordinates(failure == null ? "processed" : "failed", listener, rec);
		line.put("attempt", attempt);
		if (failure != null) {
			line.put("exception", failure.getClass().getName());
		}
		write(line);
	}

	/** A record a DLT handler received, with what the dead-letter headers say (last value of each). */
	public void deadLetter(String listener, ConsumerRecord<String, String> rec) {
		Map<String, Object> line = coordinates("dlt", listener, rec);
		line.put("original_topic", text(rec, KafkaHeaders.ORIGINAL_TOPIC));
		line.put("original_partition", number(rec, KafkaHeaders.ORIGINAL_PARTITION));
		line.put("original_offset", number(rec, KafkaHeaders.ORIGINAL_OFFSET));
		line.put("exception_fqcn", text(rec, KafkaHeaders.EXCEPTION_FQCN));
		line.put("exception_cause_fqcn", text(rec, KafkaHeaders.EXCEPTION_CAUSE_FQCN));
		line.put("exception_message", text(rec, KafkaHeaders.EXCEPTION_MESSAGE));
		line.put("attempts", attempts(rec));
		write(line);
	}

	private static Map<String, Object> coordinates(String event, String listener, ConsumerRecord<String, String> rec) {
		Map<String, Object> line = new LinkedHashMap<>();
		line.put("event", event);
		line.put("listener", listener);
		line.put("id", rec.key());
		line.put("topic", rec.topic());
		line.put("partition", rec.partition());
		line.put("offset", rec.offset());
		line.put("handled_at", System.currentTimeMillis());
		return line;
	}

	private static String text(ConsumerRecord<?, ?> rec, String name) {
		Header header = rec.headers().lastHeader(name);
		return header == null ? null : new String(header.value(), StandardCharsets.UTF_8);
	}

	/** A 4-byte int (partition) or 8-byte long (offset), big-endian, as Spring writes them. */
	private static Long number(ConsumerRecord<?, ?> rec, String name) {
		Header header = rec.headers().lastHeader(name);
		if (header == null) {
			return null;
		}
		ByteBuffer value = ByteBuffer.wrap(header.value());
		return header.value().length == Integer.BYTES ? (long) value.getInt() : value.getLong();
	}

	private synchronized void write(Map<String, Object> line) {
		StringBuilder json = new StringBuilder("{");
		line.forEach((key, value) -> {
			if (json.length() > 1) {
				json.append(", ");
			}
			json.append(quote(key)).append(": ");
			json.append(value instanceof String text ? quote(text) : String.valueOf(value));
		});
		json.append("}\n");
		try {
			Files.writeString(this.file, json, StandardCharsets.UTF_8, StandardOpenOption.CREATE,
					StandardOpenOption.APPEND);
		}
		catch (IOException ex) {
			throw new UncheckedIOException(ex);
		}
	}

	private static String quote(String text) {
		StringBuilder out = new StringBuilder("\"");
		for (char c : text.toCharArray()) {
			switch (c) {
				case '"' -> out.append("\\\"");
				case '\\' -> out.append("\\\\");
				case '\n' -> out.append("\\n");
				case '\r' -> out.append("\\r");
				case '\t' -> out.append("\\t");
				default -> out.append(c < 0x20 ? String.format("\\u%04x", (int) c) : String.valueOf(c));
			}
		}
		return out.append('"').toString();
	}

}
