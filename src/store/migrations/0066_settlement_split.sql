-- Settlement engine: a batch whose transaction reverted is split.
--
-- Its items are checked again on chain and the ones still good go back to the queue with a cap on the
-- size of the batch they may join: half the batch that reverted. A payer whose wallet makes every batch
-- revert ends alone in a batch of one, and the others settle in the halves without it.
ALTER TABLE payments ADD COLUMN batch_cap integer CHECK (batch_cap IS NULL OR batch_cap >= 1);
