// SPDX-License-Identifier: MIT
pragma solidity 0.8.30;

/// The EIP-3009 entry point BatchSettler calls: the `bytes signature` form of USDC (FiatToken v2.2).
interface IERC3009 {
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes calldata signature
    ) external;
}

/// @title BatchSettler
/// @notice Submits many EIP-3009 transfer authorizations for one token in one transaction. Each item runs
/// in its own call with at most ITEM_GAS gas, so an expired, replayed or underfunded authorization, and a
/// payer whose wallet (ERC-1271 or EIP-7702 delegated) burns gas or returns a huge revert, fails alone and
/// the others settle. Anyone may call: each signed authorization is its own permission, and the funds move
/// from the signer to the `to` it signed, never to the caller.
/// @dev The contract is generic over the token, so anyone can make it emit `Settled` for a token contract of
/// their own that moves nothing. Consumers of its events must filter on the `token` topic (and should read
/// the token's own `AuthorizationUsed` / `Transfer` logs when money matters); Tollgate's facilitator only
/// reads the events of its own transactions.
contract BatchSettler {
    struct Item {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
        bytes signature;
    }

    /// Gas forwarded to one `transferWithAuthorization`. An EOA payer needs about 40 000 (65 000 when the
    /// payee's balance slot is new); the rest is room for an ERC-1271 wallet's signature check. A payer
    /// whose check needs more fails with `ItemOutOfGas`, alone.
    uint256 public constant ITEM_GAS = 150_000;
    /// Gas an item must find left before it is attempted: ITEM_GAS plus the 1/64 that EIP-150 keeps back
    /// from a call, plus what encoding the call and recording its outcome cost afterwards.
    uint256 public constant ITEM_GAS_REQUIRED = (ITEM_GAS * 64) / 63 + 30_000;
    /// At most this many bytes of an item's revert data are copied and reported.
    uint256 public constant MAX_REASON_BYTES = 256;

    event Settled(address indexed token, address indexed from, bytes32 indexed nonce);
    event SettleFailed(address indexed token, address indexed from, bytes32 indexed nonce, bytes reason);
    /// Items `firstIndex` to the end were not attempted: too little gas was left to give each its ITEM_GAS.
    /// Nothing about them is known; the caller sends them again.
    event Deferred(address indexed token, uint256 firstIndex, uint256 count);

    error NotAContract(address token);
    /// The reason reported for an item that used all of its ITEM_GAS without finishing.
    error ItemOutOfGas(uint256 gasLimit);

    function settle(address token, Item[] calldata items) external returns (bool[] memory ok) {
        // A call to an address without code would succeed without doing anything.
        if (token.code.length == 0) revert NotAContract(token);
        ok = new bool[](items.length);
        for (uint256 i = 0; i < items.length; ++i) {
            // Invariant: an attempted item was offered its full ITEM_GAS, so an honest payer never fails for
            // lack of gas that an earlier item burnt; it is deferred instead.
            if (gasleft() < ITEM_GAS_REQUIRED) {
                emit Deferred(token, i, items.length - i);
                break;
            }
            uint256 freeMemory;
            assembly ("memory-safe") {
                freeMemory := mload(0x40)
            }
            Item calldata it = items[i];
            (bool success, bytes memory reason) = _transfer(token, it);
            if (success) {
                ok[i] = true;
                emit Settled(token, it.from, it.nonce);
            } else {
                emit SettleFailed(token, it.from, it.nonce, reason);
            }
            // The call data and reason of this item are dead: reuse their memory, so the cost of memory
            // does not grow with the batch.
            assembly ("memory-safe") {
                mstore(0x40, freeMemory)
            }
        }
    }

    /// One capped call. Return data is never copied on success and at most MAX_REASON_BYTES on failure, so
    /// a payer's wallet cannot make the batch pay for a huge revert payload.
    function _transfer(address token, Item calldata it) private returns (bool success, bytes memory reason) {
        bytes memory data = abi.encodeCall(
            IERC3009.transferWithAuthorization,
            (it.from, it.to, it.value, it.validAfter, it.validBefore, it.nonce, it.signature)
        );
        uint256 gasBefore = gasleft();
        uint256 size;
        assembly ("memory-safe") {
            success := call(ITEM_GAS, token, 0, add(data, 0x20), mload(data), 0, 0)
            size := returndatasize()
        }
        if (success) return (true, reason);
        if (size == 0 && gasBefore - gasleft() >= ITEM_GAS) {
            return (false, abi.encodeWithSelector(ItemOutOfGas.selector, ITEM_GAS));
        }
        if (size > MAX_REASON_BYTES) size = MAX_REASON_BYTES;
        reason = new bytes(size);
        assembly ("memory-safe") {
            returndatacopy(add(reason, 0x20), 0, size)
        }
    }
}
