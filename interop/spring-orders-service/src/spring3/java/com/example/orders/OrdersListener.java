package com.example.orders;

import org.apache.kafka.clients.consumer.ConsumerRecord;

import org.springframework.retry.annotation.Backoff;
import org.springframework.kafka.annotation.DltHandler;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.annotation.RetryableTopic;
import org.springframework.kafka.retrytopic.ExceptionBasedDltDestination;
import org.springframework.stereotype.Component;

/**
 * The order listener: 4 attempts, exponential back-off 1 s x 2 up to 10 s, invalid orders to
 * {@code orders-validation-dlt}. Spring Kafka 3.x: the back-off is Spring Retry's {@code @Backoff}. The rest of this file is the same in both builds.
 */
@Component
public class OrdersListener {

	private final ServiceEvents events;

	public OrdersListener(ServiceEvents events) {
		this.events = events;
	}

	@RetryableTopic(attempts = "${orders.retry.attempts}",
			backoff = @Backoff(delayExpression = "${orders.retry.delay-ms}", multiplierExpression = "${orders.retry.multiplier}",
					maxDelayExpression = "${orders.retry.max-delay-ms}"),
			exceptionBasedDltRouting = @ExceptionBasedDltDestination(suffix = "-validation",
					exceptions = OrderFailures.InvalidOrderException.class))
	@KafkaListener(id = "orders", groupId = "${orders.group}", topics = "${orders.topic}")
	public void onOrder(ConsumerRecord<String, String> order) {
		int attempt = ServiceEvents.attempts(order);
		try {
			OrderFailures.handle(order.value(), attempt);
		}
		catch (RuntimeException ex) {
			this.events.handled("orders", order, attempt, ex);
			throw ex;
		}
		this.events.handled("orders", order, attempt, null);
	}

	@DltHandler
	public void onDeadLetter(ConsumerRecord<String, String> order) {
		this.events.deadLetter("orders", order);
	}

}
